"""Scripted model turns: the step vocabulary shared by ScriptedModel and the stub server.

A step is a `ModelResponse`, a plain string (a text reply), or a callable that computes the
reply from the request, as pydantic-ai's FunctionModel does. `text`, `tool_call` and
`tool_calls` build the common ones; `load_steps` reads them from a YAML file so a project
can run offline with `model: scripted:<file>`.

A file may instead pick its steps by the conversation (`replies:`, each a `when` and its
`steps`, and a `default`): `load_script` reads it into `Replies`, so an eval of several
prompts against a scripted agent gets a different answer for each, with no Python.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fim.config.schema.script import REGEX_PREFIX, ScriptFile, ScriptStep, Steps
from fim.config.script_files import read_script
from fim.errors import ConfigError
from fim.llm.wire import new_call_id, parse_arguments
from fim.run.tokens import count_messages
from fim.schema_check import pattern_matches
from fim.types import Message, ModelResponse, ToolCall, ToolSpec, Usage

StepFunction = Callable[[list[Message], list[ToolSpec] | None], "ModelResponse | str"]
Step = ModelResponse | str | StepFunction


def text(content: str) -> ModelResponse:
    """A final text reply."""
    return ModelResponse(
        message=Message(role="assistant", content=content), finish_reason="stop", model="scripted"
    )


def _call(name: str, args: dict[str, Any] | str | None, call_id: str | None) -> ToolCall:
    """`args` as a string is sent verbatim, so a script can reproduce malformed JSON."""
    call_id = call_id or new_call_id()
    if isinstance(args, str):
        return parse_arguments(name, call_id, args)
    return ToolCall(id=call_id, name=name, arguments=dict(args or {}))


def tool_call(
    name: str, args: dict[str, Any] | str | None = None, id: str | None = None
) -> ModelResponse:
    """One tool call. Pass `args` as a string to send raw (possibly malformed) JSON."""
    return tool_calls([(name, args, id)])


def tool_calls(
    calls: Iterable[tuple[str, dict[str, Any] | str | None] | tuple[str, Any, str | None]],
    content: str | None = None,
) -> ModelResponse:
    """Several tool calls in one turn (parallel tool calling)."""
    built = [_call(c[0], c[1], c[2] if len(c) > 2 else None) for c in calls]
    return ModelResponse(
        message=Message(role="assistant", content=content, tool_calls=built),
        finish_reason="tool_calls",
        model="scripted",
    )


def estimate_tokens(value: str | None) -> int:
    """A crude count (4 characters a token) so usage events are never all zero offline."""
    return max(1, len(value) // 4) if value else 0


def with_usage(
    response: ModelResponse,
    messages: list[Message],
    tools: list[ToolSpec] | None = None,
    model: str | None = None,
) -> ModelResponse:
    """Fill in usage when a scripted response has none: the prompt counted from the whole
    request, messages and tool definitions, in the parts `fim show agent --prompt` and
    budgets count (`count_messages`), so a budget tried offline holds about as it will
    with a real model (tools were left out: newcomer-53 #14). Estimated at 4 characters a
    token, as the completion is: loading a tokenizer costs ~0.2 s of CPU a process, which
    every scripted `fim run` and `fim eval` would pay."""
    if response.usage.total_tokens:
        return response
    prompt = count_messages(messages, tools, model, exact=False) or 1
    completion = estimate_tokens(response.message.content) + sum(
        estimate_tokens(json.dumps(c.arguments) if c.arguments else c.raw_arguments)
        + estimate_tokens(c.name)
        for c in response.message.tool_calls
    )
    return response.model_copy(
        update={"usage": Usage(prompt_tokens=prompt, completion_tokens=max(1, completion))}
    )


def resolve_step(
    step: Step, messages: list[Message], tools: list[ToolSpec] | None
) -> ModelResponse:
    """Turn a step into the response for this request."""
    if callable(step) and not isinstance(step, ModelResponse):
        step = step(messages, tools)
    if isinstance(step, str):
        step = text(step)
    if not isinstance(step, ModelResponse):
        raise TypeError(
            f"a scripted step must be a ModelResponse, a string or a callable returning one, "
            f"got {type(step).__name__}"
        )
    return step


# --------------------------------------------------------------------------- YAML scripts


def _step(item: Any) -> ModelResponse:
    """One step of a script file, as `fim.config.script_files.read_script` checked it (a
    string, or a mapping of `text` and `tool_calls`/`tool_call`)."""
    if isinstance(item, str):
        return text(item)
    if set(item) == {"text"}:
        return text(str(item["text"]))
    raw = item.get("tool_calls") or [item.get("tool_call")]
    calls = [(str(call["name"]), _plain(call.get("arguments", {})), call.get("id")) for call in raw]
    return tool_calls(calls, content=item.get("text"))


def _plain(value: Any) -> Any:
    """A step's arguments as plain dicts and lists (whatever container the reader made)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Reply:
    """One `when` of a `replies` script and its steps."""

    when: str
    """The `when` as written, for messages."""
    user: str | None
    tool_result: str | None
    steps: tuple[ModelResponse, ...]

    def matches(self, user: str | None, tool_result: str | None) -> bool:
        """Whether every pattern of this `when` matches (a missing text matches none)."""
        return all(
            pattern is None or (value is not None and _found(pattern, value))
            for pattern, value in ((self.user, user), (self.tool_result, tool_result))
        )


@dataclass(frozen=True)
class Replies:
    """A script whose steps are chosen by the conversation: the first reply whose `when`
    matches the latest user message (and tool result) serves its next step; `default`
    serves when none matches."""

    replies: tuple[Reply, ...]
    default: tuple[ModelResponse, ...]

    def pick(self, messages: list[Message]) -> int | None:
        """The index of the reply for this request (`len(replies)` for `default`), or None
        when nothing matches and there is no default. Deterministic: the same messages
        always pick the same reply."""
        user, tool_result = latest_texts(messages)
        for i, reply in enumerate(self.replies):
            if reply.matches(user, tool_result):
                return i
        return len(self.replies) if self.default else None

    def steps_of(self, index: int) -> tuple[ModelResponse, ...]:
        return self.replies[index].steps if index < len(self.replies) else self.default

    def label(self, index: int) -> str:
        return f"when {self.replies[index].when!r}" if index < len(self.replies) else "default"


def latest_texts(messages: list[Message]) -> tuple[str | None, str | None]:
    """(the latest user message, the latest tool result after it): what a `when` reads.
    A tool result of an earlier turn is not this turn's, so it is never matched."""
    tool_result: str | None = None
    for message in reversed(messages):
        if message.role == "user":
            return message.content or "", tool_result
        if message.role == "tool" and tool_result is None:
            tool_result = message.content or ""
    return None, tool_result


def user_turns(messages: list[Message]) -> int:
    """How many user messages a request holds: a new one starts the replies over."""
    return sum(1 for m in messages if m.role == "user")


def _found(pattern: str, value: str) -> bool:
    """A `when` pattern against a text: `regex:` searched by RE2 (in time linear in the
    text a user may have typed, on the event loop), else a substring. A pattern RE2 cannot
    run never gets here: the script's schema refuses it (`fim validate`, and `read_script`
    when the agent runs); should one, it matches nothing rather than backtrack in `re`."""
    if not pattern.startswith(REGEX_PREFIX):
        return pattern in value
    return pattern_matches(pattern.removeprefix(REGEX_PREFIX), value) is True


Script = list[ModelResponse] | Replies
"""What a scripted model file holds: steps in order, or replies chosen by the prompt."""

_STEPS: dict[tuple[Path, str], Script] = {}
"""Parsed scripts by (path, text): every run builds a fresh ScriptedModel, and parsing the
YAML again each time was most of a scripted eval case's CPU. Responses are immutable."""


def load_steps(path: Path) -> list[ModelResponse]:
    """Read a YAML script: a list of steps, or a mapping with a `steps:` list."""
    script = load_script(path)
    if isinstance(script, Replies):
        raise ConfigError.at(
            path,
            "this script picks its steps by the prompt (`replies:`), not a list of steps",
            hint="read it with load_script, or ScriptedModel.from_file",
        )
    return script


def load_script(path: Path) -> Script:
    """Read a YAML script: a list of steps, `{steps: [...]}`, or `{replies, default}`."""
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError.at(
            path,
            f"cannot read scripted model file: {exc.strerror or exc}",
            hint="`model: scripted:<file>` names a YAML file relative to the project root",
        ) from None
    cached = _STEPS.get((path, source))
    if cached is None:
        cached = _parse_script(path, source)
        if len(_STEPS) > 256:
            _STEPS.clear()
        _STEPS[(path, source)] = cached
    return list(cached) if isinstance(cached, list) else cached


def _parse_script(path: Path, source: str) -> Script:
    """The steps of a script file (or its `replies`), read and checked by
    `fim.config.script_files` (the project's YAML reader, positions kept), which
    `fim validate` uses too: every problem at once, at its line and column."""
    script, problems = read_script(source, str(path))
    if script is None:
        raise ConfigError(problems)
    if isinstance(script, ScriptFile):
        return _built(script)
    return [_step(item) for item in script]


def _built(script: ScriptFile) -> Replies:
    replies = []
    for reply in script.replies:
        when = reply.when
        user, tool_result = (when, None) if isinstance(when, str) else (when.user, when.tool_result)
        label = (
            when
            if isinstance(when, str)
            else ", ".join(
                f"{k}: {v}" for k, v in (("user", user), ("tool_result", tool_result)) if v
            )
        )
        replies.append(Reply(label, user, tool_result, _responses(reply.steps)))
    return Replies(tuple(replies), _responses(script.default))


def _responses(steps: Steps) -> tuple[ModelResponse, ...]:
    """Validated steps as responses, built by the same code as the plain form's."""
    return tuple(
        text(step)
        if not isinstance(step, ScriptStep)
        else _step(step.model_dump(exclude_none=True))
        for step in steps
    )
