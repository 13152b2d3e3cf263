"""Response bodies of the HTTP API, as pydantic models, for the OpenAPI document.

The routes build their bodies as dicts (masked on the way out by `fim.server.http`); these
models describe those bodies so `/openapi.json` is generated rather than written by hand.
`tests/server/test_openapi.py` validates real responses against them, so a route that changes
its body without its model fails a test instead of publishing a wrong schema.
Traces (`events`) and declarations are open objects: their shapes are the event models of
`fim.events` and the project schema (`fim schema`), which evolve on their own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorDetail(_Out):
    message: str
    hint: str | None = None
    type: str | None = None
    param: str | None = None


class ErrorResponse(_Out):
    """Every 4xx/5xx of the API: what went wrong and, when we know it, what to do."""

    error: ErrorDetail


class Health(_Out):
    ok: bool


class ReloadError(_Out):
    at: float | None = None
    problems: list[dict[str, Any]] = Field(description="file, line, column and message of each")
    text: str = Field(description="the problems as `file:line:col: message` lines")


class UnavailableAgent(_Out):
    """An agent of the loaded snapshot that cannot run (a broken skill it uses, a connector
    whose `${VAR}` is unset): the snapshot loaded, this agent's runs fail until it is fixed."""

    agent: str
    reason: str = Field(description="why, with the first problem's `file:line:col`")
    path: str | None = Field(None, description="the file of that problem (operator keys)")
    line: int | None = None
    column: int | None = None


class Status(_Out):
    """The loaded snapshot and the last reload error (kept until a reload succeeds)."""

    project: str
    snapshot: str = Field(description="git commit of the project, or a content hash")
    loaded_at: float
    reloads: int
    active_runs: int
    last_reload_error: ReloadError | None = None
    unavailable: list[UnavailableAgent] = Field(
        default_factory=list, description="agents of the loaded snapshot that cannot run"
    )
    pid: int = Field(0, description="the serving process (one of `fim serve --workers N`)")
    fim_version: str = Field("", description="the fim release this process runs")


class AgentSummary(_Out):
    name: str
    description: str
    engine: str


class AgentList(_Out):
    agents: list[AgentSummary]


class AgentDeclaration(_Out):
    """The agent's compiled declaration (see `fim schema agent`), secrets masked."""

    name: str


class Usage(_Out):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float | None = Field(default=None, description="dollars, when the price is known")


class RunResult(_Out):
    run_id: str
    agent: str
    status: str
    output: str
    usage: Usage
    session_id: str | None = None
    events: list[dict[str, Any]] = Field(description="the run's events (see fim.events)")


class BackgroundAccepted(_Out):
    """A background run was accepted (202); `url` is also the Location header."""

    run_id: str
    agent: str | None = None
    workflow: str | None = None
    status: Literal["queued"] = "queued"
    executes: Literal["worker", "server"] = Field(
        description="`worker`: a `fim worker` claims it (PostgreSQL store); `server`: it "
        "runs in the server's process (SQLite store)"
    )
    url: str


class RunRecord(_Out):
    id: str
    kind: str
    name: str
    status: str
    data: dict[str, Any] | None = None
    created_at: float
    updated_at: float


class EventsCut(_Out):
    """`data.events` of `GET /v1/runs/{id}` stops before the run's last event: it holds at
    most `max_bytes` of event JSON (attack-56 F2); the rest comes from `rest`."""

    after: int = Field(description="the sequence number of the last event in `data.events`")
    max_bytes: int
    rest: str = Field(description="`/v1/runs/{id}/events?after=<after>`: the events after it")
    message: str


class RunDetail(RunRecord):
    """One run; a served agent run's `data.events` is its trace but tokens, cut at
    `events_cut.max_bytes` of JSON (absent when the trace is whole)."""

    events_cut: EventsCut | None = None


class SessionRecord(_Out):
    """A conversation: the messages of its turns, each user turn and its answer."""

    session_id: str
    messages: list[dict[str, Any]]


class SessionSummary(_Out):
    session_id: str
    updated_at: float


class SessionList(_Out):
    sessions: list[SessionSummary]


class SessionDeleted(_Out):
    session_id: str
    deleted: bool


class RunSummary(RunRecord):
    """A listed run: its record without `data`, and what the record's data says about it
    at a glance once it has ended (`fim.run_summary`; absent on an older record)."""

    tool_errors: int | None = Field(
        default=None, description="tool results that were errors (a blocked call not counted)"
    )
    hook_blocks: int | None = Field(default=None, description="calls a hook blocked")
    input: str | None = Field(
        default=None, description="the first line of the run's input, masked, cut at 80"
    )


class RunList(_Out):
    runs: list[RunSummary]


class ModelObject(_Out):
    id: str
    object: str
    owned_by: str


class ModelList(_Out):
    object: str
    data: list[dict[str, Any]]


class ChatCompletion(_Out):
    """An OpenAI chat completion object."""

    id: str
    object: str
    choices: list[dict[str, Any]]


class WorkflowSummary(_Out):
    name: str
    description: str
    inputs: dict[str, Any]


class WorkflowList(_Out):
    workflows: list[WorkflowSummary]


class WorkflowRunResult(_Out):
    run_id: str | None
    workflow: str
    status: str | None
    outputs: dict[str, Any]
    events: list[dict[str, Any]]


class UsageRow(_Out):
    day: str | None = Field(
        default=None, description="UTC date, YYYY-MM-DD (by=session: the last day it spent)"
    )
    agent: str | None = Field(default=None, description="by=agent (the default)")
    session: str | None = Field(default=None, description="by=session: the session's id")
    name: str | None = Field(default=None, description="by=session: the caller's name for it")
    key: str | None = Field(
        default=None, description="by=key: `tenant NAME`, `server.api_keys[i]` or `(no key)`"
    )
    runs: int
    calls: int = Field(description="model calls")
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    total_tokens: int
    cost: float | None = Field(description="dollars; null when no run had a known price")
    unpriced_runs: int = Field(description="runs whose model had no known price")


class KeyBudgetStatus(_Out):
    """`server.key_budget` as it stands for the calling key."""

    limits: dict[str, float]
    day: str = Field(description="the UTC day the daily limits count")
    spent_today_tokens: int
    spent_today_cost_usd: float | None = None
    declared_in: str | None = Field(default=None, description="the file that declares it")
    left_today_tokens: int | None = Field(
        default=None, description="what max_tokens_per_day leaves today (resets 00:00 UTC)"
    )
    left_today_cost_usd: float | None = Field(
        default=None, description="what max_cost_usd_per_day leaves today (resets 00:00 UTC)"
    )


class BudgetStatus(KeyBudgetStatus):
    """The project's or an agent's `budget:` as it stands today."""

    scope: Literal["project", "agent"]
    agent: str | None = None


class RunCancelled(_Out):
    run_id: str
    status: Literal["cancelling", "cancelled"] = Field(
        description="`cancelling`: it was running and records itself cancelled as it stops; "
        "`cancelled`: it was queued and never ran"
    )


class KeyLimitsStatus(_Out):
    """`server.key_limits` as it stands for the calling key, on the server process that
    answered."""

    limits: dict[str, int]
    going: int = Field(description="the key's runs going now on this process")


class UsageReport(_Out):
    since: str = Field(description="first UTC day included")
    usage: list[UsageRow] = Field(description="newest day first")
    budgets: list[BudgetStatus] = Field(
        default_factory=list, description="the project's and the agents' budgets"
    )
    key_budget: KeyBudgetStatus | None = Field(
        default=None, description="the caller's key budget, when the server sets one"
    )
    key_limits: KeyLimitsStatus | None = Field(
        default=None, description="the caller's run limits, when the server sets them"
    )


class ApprovalList(_Out):
    approvals: list[dict[str, Any]]


class DecisionResult(_Out):
    approval: dict[str, Any]
    resumed_run: str | None = Field(description="a workflow run resumed in the background")


class PromptReport(_Out):
    """What `fim show agent NAME --prompt` prints: the system prompt and tool definitions
    as the model receives them, each section with its token count."""

    agent: str
    snapshot: str
    text: str


class GraphNode(_Out):
    id: str
    type: str
    layer: int = Field(description="length of the longest path into the node")


class GraphEdge(_Out):
    source: str
    target: str
    label: str = Field(description="needs, then or else")


class WorkflowGraph(_Out):
    """The DAG of `fim graph`."""

    workflow: str
    description: str
    inputs: dict[str, Any]
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    mermaid: str


class EvalSuiteSummary(_Out):
    name: str
    description: str
    agent: str | None
    workflow: str | None
    threshold: float
    cases: list[str]


class EvalSuiteList(_Out):
    suites: list[EvalSuiteSummary]


class EvalReport(_Out):
    """As `fim eval --json` writes it: per case, pass/fail, each assertion and the trace."""

    ok: bool
    duration_s: float
    mode: str
    suites: list[dict[str, Any]]
