"""The shared vocabulary of fim: messages, tools, models, hooks and events.

Every module imports from here and nothing here imports from the rest of fim, so the
data flow (load -> compile -> snapshot -> engine -> events) never gains a back-edge.
Keep this module free of heavy imports: it is on the path of `fim --help`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

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


class Usage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None

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

    name: str
    description: str
    parameters: JSONSchema
    category: str
    metadata: dict[str, Any]

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


@runtime_checkable
class Hook(Protocol):
    name: str
    point: HookPoint
    priority: int

    def matches(self, tool_name: str | None) -> bool: ...

    async def __call__(self, context: HookContext) -> HookResult: ...


# --------------------------------------------------------------------------- events


class _Event(_Model):
    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str = ""
    ts: float = Field(default_factory=time.time)


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    agent: str
    input: str
    snapshot_version: str = ""
    engine: str = "react"


class LLMCall(_Event):
    type: Literal["llm_call"] = "llm_call"
    model: str
    iteration: int
    usage: Usage = Field(default_factory=Usage)
    duration_ms: float = 0.0


class Token(_Event):
    type: Literal["token"] = "token"
    text: str


class ToolCallEvent(_Event):
    type: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class HookEvent(_Event):
    type: Literal["hook"] = "hook"
    hook: str
    point: HookPoint
    decision: Literal["allow", "block", "modify", "context"]
    tool_name: str | None = None
    reason: str | None = None
    side_effects: list[str] = Field(default_factory=list)


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    duration_ms: float = 0.0


class MessageEvent(_Event):
    type: Literal["message"] = "message"
    role: Literal["assistant", "user", "system"] = "assistant"
    content: str


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    output: str
    status: Literal["ok", "max_iterations", "cancelled", "error"] = "ok"
    usage: Usage = Field(default_factory=Usage)
    iterations: int = 0
    duration_ms: float = 0.0


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    message: str
    kind: str = "run_error"


class Notice(_Event):
    """Something a user should know that is not an error (a fallback, a selection)."""

    type: Literal["notice"] = "notice"
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class NodeStarted(_Event):
    type: Literal["node_started"] = "node_started"
    node: str
    node_type: str


class NodeFinished(_Event):
    type: Literal["node_finished"] = "node_finished"
    node: str
    output: Any = None
    duration_ms: float = 0.0


class NodeSkipped(_Event):
    type: Literal["node_skipped"] = "node_skipped"
    node: str
    reason: str = ""


class NodeFailed(_Event):
    type: Literal["node_failed"] = "node_failed"
    node: str
    error: str
    attempt: int = 1


class WorkflowFinished(_Event):
    type: Literal["workflow_finished"] = "workflow_finished"
    workflow: str
    status: Literal["ok", "failed", "paused", "cancelled"] = "ok"
    outputs: dict[str, Any] = Field(default_factory=dict)
    duration_ms: float = 0.0


class PlanCreated(_Event):
    """The DAG engine's plan for one round (round 1, then each re-plan)."""

    type: Literal["plan"] = "plan"
    round: int = 1
    steps: list[dict[str, Any]] = Field(default_factory=list)
    reason: str = ""


class StepStarted(_Event):
    type: Literal["step_started"] = "step_started"
    step: str
    task: str


class StepFinished(_Event):
    type: Literal["step_finished"] = "step_finished"
    step: str
    output: str
    status: Literal["ok", "max_iterations", "cancelled", "error"] = "ok"
    duration_ms: float = 0.0


Event = Annotated[
    RunStarted
    | LLMCall
    | Token
    | ToolCallEvent
    | HookEvent
    | ToolResultEvent
    | MessageEvent
    | RunFinished
    | ErrorEvent
    | Notice
    | NodeStarted
    | NodeFinished
    | NodeSkipped
    | NodeFailed
    | WorkflowFinished
    | PlanCreated
    | StepStarted
    | StepFinished,
    Field(discriminator="type"),
]


class Engine(Protocol):
    """Runs one request and yields the trace. Engines never print; surfaces do."""

    def run(self, input: str | list[Message]) -> AsyncIterator[Event]: ...


class HookRunner(Protocol):
    """Runs every hook of one point for one run and merges their results.

    The merged `HookResult` has `allow=False` at the first block, the final rewritten
    `modified_args`/`modified_result`, and every `additional_context` joined. The events
    describe each hook's decision, in order, for the trace.
    """

    async def run(
        self, point: HookPoint, context: HookContext
    ) -> tuple[HookResult, list[HookEvent]]: ...


def build_validators() -> None:
    """Build every value type's validator now rather than on first use: long-lived
    processes (`fim serve`) call this at start-up so the first request does not pay."""
    pending = [_Model]
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls not in (_Model, _Event):
            cls.model_rebuild()
