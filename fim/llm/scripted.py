"""Test doubles for fim's model layer, shipped in the library so every test (and every
offline example) uses the same ones instead of ad-hoc fakes.

`ScriptedModel` is **a test double, not a model**: it replays a queue of scripted turns
(text replies, tool calls, or functions of the request), records every request, and fails
loudly when the script and the agent disagree — an unexpected extra call raises
`ScriptExhausted`, and `assert_consumed()` fails when steps were left over. An agent selects
it with `model: scripted:<file.yaml>`; its replies are whatever the file says, never the
output of a language model. A file of `replies:` (`fim.llm.script.Replies`) picks the steps
by the conversation instead: each reply keeps its own place, started over by a new user
message, so every prompt of an eval gets the answer written for it.

The HTTP counterpart, `fim.testing.model_server.OpenAIStubServer` (a real OpenAI-compatible
server on 127.0.0.1), lives with the other test doubles: this backend does not need it.

`allow_model_requests(True)` re-enables requests to non-loopback hosts inside a block in a
suite that turned them off (tests/conftest.py does, for every test).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm import switch
from fim.llm.backend import Backend
from fim.llm.catalog import SCRIPTED
from fim.llm.script import (
    Replies,
    Step,
    load_script,
    resolve_step,
    text,
    tool_call,
    tool_calls,
    user_turns,
    with_usage,
)
from fim.masking import known
from fim.types import Message, Model, ModelResponse, TextDelta, ToolSpec

__all__ = [
    "ScriptExhausted",
    "ScriptedModel",
    "allow_model_requests",
    "text",
    "tool_call",
    "tool_calls",
]


class ScriptExhausted(RunError):
    """The agent asked the scripted model for more turns than the script holds."""


class ScriptedModel:
    """A queue of scripted turns standing in for a model (a test double, not a model).

    `requests` holds `(messages, tools)` of every call, copied, so a test can assert what
    the engine sent. Unless a step gives usage, its prompt tokens are counted from the whole
    request, tool definitions included (`fim.llm.script.with_usage`).
    """

    def __init__(self, steps: Iterable[Step] | Replies = (), name: str = "scripted") -> None:
        self.name = name
        self._replies = steps if isinstance(steps, Replies) else None
        self._steps: deque[Step] = deque(() if isinstance(steps, Replies) else steps)
        self._total = len(self._steps)
        self._served: dict[int, int] = {}
        """Steps each reply served in this user turn (`Replies` only)."""
        self._turn = 0
        self.requests: list[tuple[list[Message], list[ToolSpec] | None]] = []

    @classmethod
    def from_file(cls, path: str | Path, name: str | None = None) -> ScriptedModel:
        """A fresh model (fresh queue) from a YAML script, each time it is called."""
        path = Path(path)
        return cls(load_script(path), name=name or f"scripted:{path.name}")

    @property
    def remaining(self) -> int:
        return len(self._steps)

    def add(self, *steps: Step) -> None:
        """Append steps to the script (e.g. between turns of a multi-turn test)."""
        self._steps.extend(steps)
        self._total += len(steps)

    def _next(self, messages: list[Message], tools: list[ToolSpec] | None) -> ModelResponse:
        self.requests.append(
            ([m.model_copy() for m in messages], list(tools) if tools is not None else None)
        )
        if self._replies is not None:
            return self._reply(self._replies, messages, tools)
        if not self._steps:
            last = messages[-1].content if messages else None
            raise ScriptExhausted(
                f"{self.name}: no scripted step left for call #{len(self.requests)} "
                f"(the script had {self._total} steps); last message: {_preview(last)}",
                hint="add a step to the script, or check why the agent asked the model again",
            )
        step = self._steps.popleft()
        return self._as_mine(
            with_usage(resolve_step(step, messages, tools), messages, tools, self.name)
        )

    def _reply(
        self, replies: Replies, messages: list[Message], tools: list[ToolSpec] | None
    ) -> ModelResponse:
        """The next step of the reply this request picks; a new user message starts every
        reply over, so a chat turn that matches the same `when` gets the same steps."""
        turn = user_turns(messages)
        if turn != self._turn:
            self._turn, self._served = turn, {}
        index = replies.pick(messages)
        user = next((m.content for m in reversed(messages) if m.role == "user"), None)
        if index is None:
            raise ScriptExhausted(
                f"{self.name}: no reply's `when` matches the latest user message "
                f"{_preview(user)} and the script has no `default`",
                hint="add a reply for it, or `default:` steps for every other prompt",
            )
        steps = replies.steps_of(index)
        served = self._served.get(index, 0)
        if served >= len(steps):
            raise ScriptExhausted(
                f"{self.name}: the reply {replies.label(index)} has no step left for call "
                f"#{len(self.requests)} (it has {len(steps)}); latest user message: "
                f"{_preview(user)}",
                hint="add a step to that reply, or check why the agent asked the model again",
            )
        self._served[index] = served + 1
        return self._as_mine(with_usage(steps[served], messages, tools, self.name))

    def _as_mine(self, response: ModelResponse) -> ModelResponse:
        """`response` named after this model; from a project's `scripted:` model, priced at
        $0 unless its step gave a cost: that model's price is known, and zero (`fim runs
        list`, `fim usage` say 0, not "unknown"; budgets price it by
        `fim.llm.catalog.cost`, which agrees). A bare `ScriptedModel` in a test stands
        in for some model whose price it cannot know, and leaves the cost unset."""
        update: dict[str, Any] = {"model": self.name}
        if self.name.startswith(SCRIPTED) and response.usage.cost is None:
            update["usage"] = response.usage.model_copy(update={"cost": 0.0})
        return response.model_copy(update=update)

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        return self._next(messages, tools)

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        response = self._next(messages, tools)
        for piece in _chunks(response.message.content or ""):
            yield TextDelta(text=piece)
        yield response

    def assert_consumed(self) -> None:
        """Fail if scripted steps were never asked for: the agent stopped early. With
        `replies`, only the replies this turn started count: the others were for other
        prompts."""
        if self._replies is not None:
            for index, served in self._served.items():
                steps = self._replies.steps_of(index)
                if served < len(steps):
                    raise AssertionError(
                        f"{self.name}: the reply {self._replies.label(index)} served {served} "
                        f"of its {len(steps)} steps; next unused step: {_describe(steps[served])}"
                    )
            return
        if self._steps:
            raise AssertionError(
                f"{self.name}: {len(self._steps)} of {self._total} scripted steps were not "
                f"used (the model was called {len(self.requests)} times); next unused step: "
                f"{_describe(self._steps[0])}"
            )


def _preview(value: str | None, limit: int = 80) -> str:
    if value is None:
        return "<none>"
    head, cut = known().head(value, limit)  # masked whole, then cut
    return repr(head + "..." if cut else head)


def _describe(step: Step) -> str:
    if isinstance(step, str):
        return f"text {_preview(step)}"
    if isinstance(step, ModelResponse):
        if step.message.tool_calls:
            return "tool calls " + ", ".join(c.name for c in step.message.tool_calls)
        return f"text {_preview(step.message.content)}"
    return f"function {getattr(step, '__name__', repr(step))}"


def _chunks(content: str, pieces: int = 3) -> Iterator[str]:
    """Split text into a few word-aligned chunks, as a streaming model would send it."""
    if not content:
        return
    words = content.split(" ")
    size = max(1, -(-len(words) // pieces))
    for i in range(0, len(words), size):
        chunk = " ".join(words[i : i + size])
        yield chunk if i + size >= len(words) else chunk + " "


@contextlib.contextmanager
def allow_model_requests(allowed: bool = True) -> Iterator[None]:
    """Set `fim.llm.ALLOW_MODEL_REQUESTS` inside a block, restoring it afterwards."""
    previous = switch.ALLOW_MODEL_REQUESTS
    switch.ALLOW_MODEL_REQUESTS = allowed
    try:
        yield
    finally:
        switch.ALLOW_MODEL_REQUESTS = previous


class ScriptedBackend(Backend):
    """`scripted:<file.yaml>`: the file is resolved against the project root (default cwd)."""

    name = "scripted"
    schemes = ("scripted:",)

    @classmethod
    def key_problem(cls, settings: ModelSettings) -> RunError | None:
        return None  # a script answers; no key, no endpoint

    @classmethod
    def endpoint(cls, settings: ModelSettings) -> str | None:
        return None

    @classmethod
    def build(cls, settings: ModelSettings, root: Path | None) -> Model:
        path = Path(settings.model.removeprefix("scripted:").strip())
        if not path.is_absolute():
            path = (root or Path.cwd()) / path
        return ScriptedModel.from_file(path, name=settings.model)
