"""The events every engine yields and every surface consumes (CLI, SSE, store, eval).

One trace, many views: engines never print; they yield these, in order.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Protocol

from pydantic import ConfigDict, Field

from fim.types import HookContext, HookPoint, HookResult, Usage, _Model

# --------------------------------------------------------------------------- events

RunStatus = Literal["ok", "max_iterations", "cancelled", "error"]
"""How an agent run (or one DAG step, which is one) ended."""


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
    trace_id: str | None = None
    """The run's OpenTelemetry trace (32 hex digits) when it is traced and sampled, set as
    the event is first read (`fim.observe.run_spans.RunSpans.on`): what finds the run in a
    trace backend; None when tracing is off."""


class LLMCall(_Event):
    type: Literal["llm_call"] = "llm_call"
    model: str
    iteration: int
    usage: Usage = Field(default_factory=Usage)
    duration_ms: float = 0.0
    request_model: str = ""
    provider: str = ""
    finish_reason: str | None = None
    request: dict[str, Any] | None = None
    """What the call sent, when content capture is on (`fim.engines.call_content`): the
    first call's system prompt, tool names and messages, a later call's new messages only;
    masked, at most 64 KiB. None when capture is off."""
    response: dict[str, Any] | None = None
    """What the model answered (text, tool calls, finish reason), masked, when capture is on."""


class Token(_Event):
    type: Literal["token"] = "token"
    text: str


class ToolCallEvent(_Event):
    type: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    target: str | None = None
    """The tool the call really runs when it is not `name` (a meta-tool call: `connector`
    runs `crm__get_order`), as hooks see it; eval assertions match either."""
    target_arguments: dict[str, Any] | None = None
    """The target's own arguments (the action's parameters), when `target` is set."""


class HookEvent(_Event):
    type: Literal["hook"] = "hook"
    hook: str
    point: HookPoint
    decision: Literal["allow", "block", "modify", "context"]
    tool_name: str | None = None
    reason: str | None = None
    side_effects: list[str] = Field(default_factory=list)
    call_id: str | None = None  # the tool call a Pre/PostToolUse decision is about
    failed: bool = False
    """A block because the hook could not decide (`fim.hooks.base.HookFailed`: it raised,
    timed out, its command failed), not because its policy refused the call."""
    at: str | None = None
    """A Python hook that raised: the innermost frame of the project's code it raised in
    (`hooks/guards.py:12 in __call__`); `traceback` the project's frames, masked
    (`fim.project_frames`). Never in the block reason the model reads."""
    traceback: str | None = None


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    duration_ms: float = 0.0
    """The call's own time, without `startup_ms`: the one-off start-up it waited for (the
    schema validator's load, the worker pool's start: `fim.startup_cost`)."""
    startup_ms: float = 0.0
    at: str | None = None
    """A project's Python tool that raised: the innermost frame of the project's code
    (`hooks/mytools.py:10 in lookup_order`); `traceback` its frames, masked, never sent to
    the model, which reads `content` only (`fim.project_frames`)."""
    traceback: str | None = None
    http: dict[str, Any] | None = None
    """An HTTP connector's call: `{method, url, status}`, the URL without user-info and its
    query values masked, `status` None when no response came (`fim.connectors.http_shown`)."""


class ToolProgress(_Event):
    """A running tool reported progress (an MCP `notifications/progress`): shown live by
    `fim run`, streamed by `fim serve`; each one also extends the call's idle deadline."""

    type: Literal["tool_progress"] = "tool_progress"
    call_id: str | None = None
    name: str
    progress: float
    total: float | None = None
    message: str | None = None


class MessageEvent(_Event):
    type: Literal["message"] = "message"
    role: Literal["assistant", "user", "system"] = "assistant"
    content: str


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    output: str
    status: RunStatus = "ok"
    usage: Usage = Field(default_factory=Usage)
    iterations: int = 0
    duration_ms: float = 0.0


class RunRestarted(_Event):
    """A background run starting again from its request after an attempt that stopped
    before its end (its worker was killed): the events before this one in the run's log
    are the stopped attempt's, and the new attempt's follow, from its `run_started`."""

    type: Literal["run_restarted"] = "run_restarted"
    attempt: int = 2
    reason: str = "the previous attempt stopped before the run finished"


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
    status: RunStatus = "ok"
    duration_ms: float = 0.0


Event = Annotated[
    RunStarted
    | LLMCall
    | Token
    | ToolCallEvent
    | HookEvent
    | ToolResultEvent
    | ToolProgress
    | MessageEvent
    | RunFinished
    | RunRestarted
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


class HookRunner(Protocol):
    """Runs every hook of one point for one run and merges their results.

    The merged `HookResult` has `allow=False` at the first block, the final rewritten
    `modified_args`/`modified_result`, and every `additional_context` joined. The events
    describe each hook's decision, in order, for the trace.
    """

    async def run(
        self, point: HookPoint, context: HookContext
    ) -> tuple[HookResult, list[HookEvent]]: ...


class NoHooks:
    """The `HookRunner` of a run with hooks switched off (the eval path): allows everything.
    One class for the engines and the hook builder alike."""

    async def run(
        self, point: HookPoint, context: HookContext
    ) -> tuple[HookResult, list[HookEvent]]:
        return HookResult(), []


def build_validators() -> None:
    """Build every value type's validator now rather than on first use: long-lived
    processes (`fim serve`) call this at start-up so the first request does not pay."""
    pending = [_Model]
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls not in (_Model, _Event):
            cls.model_rebuild()
