"""What a caller may change about one run of an agent, and the model wrapper applying it.

The OpenAI endpoint turns request fields into a `RunOverrides`: sampling settings for the
agent's model (when the agent's `client_sampling` allows them), an output contract from
`response_format`, and client-side tools (OpenAI `tools`) the model may call but the
caller runs. `OverriddenModel` applies them at the model boundary, so the engine stays the
same for every surface; the engine only learns the client tools' names (it stops when
one is called) and the output contract (it validates the final answer).

`output_contract` also reads an agent's or node's declared `output_schema`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.structured import OutputContract
from fim.types import Message, ModelResponse, TextDelta, ToolSpec

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.types import Model

SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)
"""OpenAI request fields passed through to the agent's model as provider options."""


@dataclass(frozen=True)
class RunOverrides:
    sampling: dict[str, Any] = field(default_factory=dict)
    output: OutputContract | None = None
    client_tools: tuple[ToolSpec, ...] = ()
    tool_choice: Any = None
    """`required` or a named function: sent on the run's first model call only (later
    turns must be free to answer after the server's own tools ran)."""

    @property
    def client_tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.client_tools)

    def wraps_model(self) -> bool:
        return bool(self.sampling or self.client_tools or self.tool_choice is not None)


class OverriddenModel:
    """The agent's model with the caller's sampling options and client tools added."""

    def __init__(self, inner: Model, overrides: RunOverrides) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "")
        self.overrides = overrides
        self._calls = 0

    def _prepare(
        self, tools: list[ToolSpec] | None, options: dict[str, Any]
    ) -> tuple[list[ToolSpec] | None, dict[str, Any]]:
        merged = {**options, **self.overrides.sampling}
        if self.overrides.tool_choice is not None and self._calls == 0:
            merged["tool_choice"] = self.overrides.tool_choice
        self._calls += 1
        # a client tool shadows an agent tool of the same name (the caller runs it)
        shadowed = self.overrides.client_tool_names
        all_tools = [
            *(t for t in tools or [] if t.name not in shadowed),
            *self.overrides.client_tools,
        ]
        return all_tools or None, merged

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        tools, merged = self._prepare(tools, options)
        return await self.inner.complete(messages, tools, **merged)

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        tools, merged = self._prepare(tools, options)
        async for item in self.inner.stream(messages, tools, **merged):
            yield item


def output_contract(snapshot: Snapshot, spec: dict[str, Any] | str | None) -> OutputContract | None:
    """The contract of a declared `output_schema`: an inline JSON Schema, or `module:Class`
    naming a pydantic model in the project's hooks/ folder (validated by pydantic). The
    compile that made `snapshot` imported and checked that class (in a reload's child
    process first: `fim.build.checks.check_output_classes`), so a run, on the server's
    event loop, takes it from the modules the snapshot holds (`Snapshot.loaded`, not
    only the loader's bounded cache) and never imports a module."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        return OutputContract(spec)
    # deferred: loading the project's module loader costs tens of ms
    from fim.build.checks import OutputClassError, output_class
    from fim.hooks.python_hooks import load_module

    try:
        cls = output_class(snapshot, spec, load_module)
    except OutputClassError as exc:
        raise RunError(exc.message, hint=exc.hint) from None
    return OutputContract(model=cls, name=spec.partition(":")[2].strip())
