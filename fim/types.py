"""The shared vocabulary of fim: messages, tools, models and hooks (events: fim/events.py).

Every module imports from here and nothing here imports from the rest of fim, so the
data flow (load -> compile -> snapshot -> engine -> events) never gains a back-edge.
Keep this module free of heavy imports: it is on the path of `fim --help`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

JSONSchema = dict[str, Any]


class _Model(BaseModel):
    """Base of the runtime's value types. Validators are built on first use, not at import:
    `fim validate` and `fim --help` never build a message or an event."""

    model_config = ConfigDict(defer_build=True)


# --------------------------------------------------------------------------- messages


class ToolCall(_Model):
    """A tool call requested by the model.

    `raw_arguments` keeps the model's text when it was not valid JSON, so the engine can
    tell the model exactly what it sent instead of guessing.
    """

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None


class Message(_Model):
    """One chat message in the OpenAI shape, which every provider adapter maps to."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    images: list[str] = Field(default_factory=list)
    """Image URLs (`https:` or `data:image/...;base64,`) given with a user message; sent to
    the model as OpenAI `image_url` content parts after the text. Text stays in `content`
    so everything reading messages as text is unchanged."""
    audio: list[str] = Field(default_factory=list)
    """Audio clips (`data:audio/wav;base64,...` or `audio/mpeg`) given with a user message
    (a tool's audio result for a model that accepts audio); sent as `input_audio` parts."""


NO_SUCH_TOOL = "Error: there is no tool named "
"""How the result of a call to a name the run has no tool by begins (the registry's
refusal); metrics read it to keep made-up names out of their labels."""
NOT_RUN = "Error: not run: "
"""How the result of a call the engine did not run begins (past a turn's limit)."""


class Usage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    cached_tokens: int = 0
    """Prompt tokens the provider served from its cache (counted in `prompt_tokens` too)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None
            if self.cost is None and other.cost is None
            else (self.cost or 0) + (other.cost or 0)
        )
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=cost,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


class ToolSpec(_Model):
    """What the model sees of a tool: the function definition, nothing runnable."""

    name: str
    description: str
    parameters: JSONSchema = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelResponse(_Model):
    """A complete model turn: an assistant message (text and/or tool calls) plus usage."""

    message: Message
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""


class TextDelta(_Model):
    """A piece of streamed assistant text."""

    text: str


@runtime_checkable
class Model(Protocol):
    """A chat model. `stream` yields `TextDelta`s and ends with one `ModelResponse`."""

    name: str

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse: ...

    def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]: ...


# --------------------------------------------------------------------------- tools


class ToolResult(_Model):
    """A tool's observation. `is_error` marks failures the model should react to."""

    content: str
    is_error: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Tool(Protocol):
    """One capability the model can call. Builtins, connector actions, databases, MCP tools
    and meta-tools all implement this, so one registry and one hook pipeline serve them all.

    `metadata` carries facts hooks need (`connector`, `action`, `access`,
    `requires_confirmation`, `sql` ...) without the hook knowing the tool's class.
    """

    # Read-only for whoever holds a Tool: a plain attribute or a property both satisfy them.
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> JSONSchema: ...
    @property
    def category(self) -> str: ...
    @property
    def metadata(self) -> dict[str, Any]: ...

    async def run(self, **arguments: Any) -> str | ToolResult: ...


# --------------------------------------------------------------------------- hooks


class CallView:
    """What hooks see of one tool call: the real target and the target's own arguments.

    A meta-tool call (`mcp` with `subcommand: call`) is shown to hooks as the tool it runs
    (`sh__run_command` with `{"command": ...}`), so a guard written for the direct tool holds
    in progressive mode too. `to_call` turns target arguments a hook rewrote back into the
    arguments of the tool the model called; None means they are the same.
    """

    __slots__ = ("args", "metadata", "name", "to_call")

    def __init__(
        self,
        name: str,
        args: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        to_call: Any = None,
    ) -> None:
        self.name = name
        self.args = args
        self.metadata = metadata or {}
        self.to_call = to_call

    def call_arguments(self, target_args: dict[str, Any]) -> dict[str, Any]:
        return self.to_call(target_args) if self.to_call is not None else target_args

    def rewritten(self, target_args: dict[str, Any]) -> CallView:
        return CallView(self.name, target_args, self.metadata, self.to_call)

    def context(
        self,
        point: HookPoint,
        agent: str,
        run_id: str,
        metadata: dict[str, Any],
        result: str | None = None,
    ) -> HookContext:
        """The HookContext of this call at `point` (every route builds it here)."""
        return HookContext(
            point=point,
            agent=agent,
            run_id=run_id,
            tool_name=self.name,
            tool_args=self.args,
            tool_result=result,
            metadata={**self.metadata, **metadata},
        )

    def __repr__(self) -> str:
        return f"CallView({self.name!r}, {self.args!r})"


HookPoint = Literal["SessionStart", "PreToolUse", "PostToolUse"]


class HookContext(_Model):
    """What a hook sees. For PostToolUse, `tool_result` holds the observation so far."""

    point: HookPoint
    agent: str
    run_id: str
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    tool_result: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


def session_source(history: list[Message]) -> Literal["startup", "resume"]:
    """What a SessionStart hook is told about the conversation, in Claude Code's words
    (`source` on its stdin, what its matcher is matched against): `resume` when the history
    already holds an answer or a tool result (a continued session), else `startup`."""
    return "resume" if any(m.role in ("assistant", "tool") for m in history) else "startup"


class HookResult(_Model):
    """A hook's decision. `allow=False` blocks (with `error` as the reason the model reads);
    `modified_args` / `modified_result` rewrite what flows on; `additional_context` is added
    to the system prompt at SessionStart."""

    allow: bool = True
    error: str | None = None
    modified_args: dict[str, Any] | None = None
    modified_result: str | None = None
    additional_context: str | None = None
    side_effects: list[str] = Field(default_factory=list)
