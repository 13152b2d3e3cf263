"""`fim-model-server --script FILE`: a model over HTTP that answers each prompt from a
scripted model's file (newcomer-55 #12), the same `replies:` a project's `scripted:` model
reads (`fim.llm.script`), so an agent can be tried against a real endpoint (its cost from
`price:`, its latency, its tool calls with real arguments) with no Python of one's own.

The server keeps no state: any number of conversations share it, and each request is
answered from the conversation it carries, as `ScriptedModel` answers one run. A
`replies:` script picks the reply whose `when` matches the latest user message (and tool
result) and serves the step after the ones that reply served since that message; a plain
list of steps serves step N to the Nth model call of the conversation. No reply, or no
step left, is an HTTP 500 that says so, as the scripted model's error does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fim.llm.script import Replies, Script, load_script
from fim.llm.wire import new_call_id
from fim.testing.stub_wire import fim_messages
from fim.types import Message, ModelResponse


def script_handler(path: str | Path) -> Any:
    """The `OpenAIStubServer` handler of the script file at `path` (read and checked now:
    a broken file is a `ConfigError` with every problem at its line, before serving)."""
    script = load_script(Path(path))

    def handler(request: dict[str, Any]) -> ModelResponse:
        messages = [Message.model_validate(m) for m in fim_messages(request)]
        return _fresh_ids(reply_for(script, messages))

    return handler


def reply_for(script: Script, messages: list[Message]) -> ModelResponse:
    """The step `script` serves for a request of `messages`; LookupError when none is."""
    if not isinstance(script, Replies):
        served = sum(1 for m in messages if m.role == "assistant")
        if served >= len(script):
            raise LookupError(
                f"script exhausted: {len(script)} steps, and this is model call #{served + 1}"
            )
        return script[served]
    index = script.pick(messages)
    latest = _latest(messages)
    if index is None:
        said = messages[latest].content if latest is not None else None
        raise LookupError(
            f"no reply's `when` matches the latest user message {_preview(said)} and the "
            "script has no `default`"
        )
    start = (latest or 0) + 1
    served = sum(
        1
        for at in range(start, len(messages))
        if messages[at].role == "assistant" and script.pick(messages[:at]) == index
    )
    steps = script.steps_of(index)
    if served >= len(steps):
        raise LookupError(
            f"the reply {script.label(index)} has no step left (it has {len(steps)}, and "
            f"served {served} since the latest user message)"
        )
    return steps[served]


def _latest(messages: list[Message]) -> int | None:
    """The index of the latest user message: its steps start after it."""
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)


def _fresh_ids(response: ModelResponse) -> ModelResponse:
    """`response` with new tool call ids: a script's step is parsed once, and a reply served
    twice in one conversation would repeat its ids."""
    calls = response.message.tool_calls
    if not calls:
        return response
    fresh = [call.model_copy(update={"id": new_call_id()}) for call in calls]
    message = response.message.model_copy(update={"tool_calls": fresh})
    return response.model_copy(update={"message": message})


def _preview(text: str | None, limit: int = 80) -> str:
    if text is None:
        return "(none)"
    shown = " ".join(text.split())
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")


__all__ = ["reply_for", "script_handler"]
