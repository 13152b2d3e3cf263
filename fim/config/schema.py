"""Pydantic models of every declaration kind. These models *are* the schema: `fim schema`
exports JSON Schema from them, so a field's docstring is what an editor shows the user
(fim.config.export reads the docstrings from this file's source at export time rather than
through pydantic's `use_attribute_docstrings`, which costs every start-up ~25 ms).

Everything a user types is `extra="forbid"`, so a typo is an error with a did-you-mean,
never a silently ignored key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

JSONSchema = dict[str, Any]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- fim.yaml


class ModelSettings(Strict):
    """A model with its connection settings. `model` is a litellm string such as
    `openai/gpt-4o-mini`, `anthropic/claude-sonnet-4-5`, `ollama/qwen2.5`, or
    `scripted:<file>` for the offline test double."""

    model: str
    """litellm model string, e.g. `openai/gpt-4o-mini`."""
    api_base: str | None = None
    """Base URL of an OpenAI-compatible or self-hosted endpoint."""
    api_key: str | None = None
    """API key; use `${VAR}` so the secret stays out of git."""
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float = 60.0
    """Seconds before one model request is abandoned."""
    max_retries: int = 2
    """Retries with exponential backoff on 429/5xx and connection errors."""
    context_window: int | None = None
    """Tokens the model accepts; defaults to what litellm knows of the model."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific keyword arguments passed through unchanged."""


ModelRef = str | ModelSettings

ToolMode = Literal["progressive", "legacy"]


class ToolModes(Strict):
    """How capabilities are shown to the model: `progressive` puts short stubs in the prompt
    and details behind meta-tools; `legacy` registers every tool (skills: `inline`)."""

    skills: Literal["progressive", "inline"] | None = None
    connectors: ToolMode | None = None
    databases: ToolMode | None = None
    mcp: ToolMode | None = None


class ToolSelection(Strict):
    threshold: int = 12
    """Above this many tools, the `fast` model picks the ones a request needs."""
    max: int = 6
    """How many tools the selection keeps (pinned tools and `read_skill` come on top)."""


class StdioServer(Strict):
    """An MCP server started as a subprocess speaking stdio."""

    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    description: str | None = None
    timeout: float = 30.0
    """Seconds one tool call may take."""


class HttpServer(Strict):
    """An MCP server reached over streamable HTTP (or legacy SSE)."""

    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    description: str | None = None
    timeout: float = 30.0


McpServer = StdioServer | HttpServer


class ServerSettings(Strict):
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: list[str] = Field(default_factory=list)
    """Bearer keys accepted by every route but /healthz; empty strings are ignored."""
    cors_origins: list[str] = Field(default_factory=list)
    max_body_bytes: int = 1_048_576


class WebFetchSettings(Strict):
    allow_private: bool = False
    """Allow `web_fetch` to reach loopback and private addresses (off: SSRF guard)."""
    allow_hosts: list[str] = Field(default_factory=list)
    """Hosts reachable even when private (e.g. `127.0.0.1`)."""


class Paths(Strict):
    agents: str = "agents"
    skills: str = "skills"
    workflows: str = "workflows"
    connectors: str = "connectors"
    hooks: str = "hooks"
    evals: str = "evals"


class Project(Strict):
    """The project file `fim.yaml` at the root of a fim repository."""

    name: str = "fim"
    description: str = ""
    models: dict[str, ModelRef] = Field(default_factory=dict)
    """Model roles (`general`, `fast`, ...) -> litellm strings or full settings."""
    tool_modes: ToolModes = Field(default_factory=ToolModes)
    tool_selection: ToolSelection = Field(default_factory=ToolSelection)
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    server: ServerSettings = Field(default_factory=ServerSettings)
    state: str = "sqlite:///.fim/state.db"
    """State store URL: SQLite (default) or PostgreSQL."""
    paths: Paths = Field(default_factory=Paths)
    env_allowlist: list[str] = Field(default_factory=list)
    """Environment variables workflow templates may read as `env.NAME`."""
    web_fetch: WebFetchSettings = Field(default_factory=WebFetchSettings)
    sandbox: str = ".fim/sandbox"
    """Directory `file_ops` and `python_exec` are confined to."""
    read_only: bool = False
    """Project-wide read-only: `readonly_guard` blocks writes for every agent."""
    max_depth: int = 5
    """Cap on nested agent/workflow calls."""


# --------------------------------------------------------------------------- hooks


class HookSpec(Strict):
    """One hook on an agent: exactly one of `use` (builtin), `command` (shell, Claude Code
    protocol), `python` (`module:Class` from hooks/) or `ref` (a file in hooks/)."""

    use: str | None = None
    """Builtin hook name: confirm, readonly_guard, truncate, audit_log, rate_limit."""
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    """Options of a builtin or Python hook."""
    command: str | None = None
    """Shell command receiving the event as JSON on stdin (Claude Code hook protocol)."""
    python: str | None = None
    """`module:Class` of a hook class in the project's hooks/ folder."""
    ref: str | None = None
    """Name of a reusable declaration in hooks/*.yaml."""
    event: Literal["SessionStart", "PreToolUse", "PostToolUse"] | None = None
    """Hook point; builtins know their own, command and python hooks need it."""
    matcher: str | None = None
    """Glob (`crm__*`) or regex (`re:^crm__`) on the tool name; none matches every tool."""
    priority: int = 100
    """Lower runs first."""
    timeout: float = 30.0
    """Seconds a command or Python hook may take before it blocks (fail closed)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> HookSpec:
        kinds = [k for k in ("use", "command", "python", "ref") if getattr(self, k)]
        if len(kinds) != 1:
            raise ValueError(
                "a hook needs exactly one of 'use', 'command', 'python' or 'ref'"
                + (f", got {', '.join(kinds)}" if kinds else "")
            )
        return self


class HookDecl(HookSpec):
    """A reusable hook in hooks/<name>.yaml, referenced from agents with `ref: <name>`."""

    name: str = ""
    description: str = ""


# --------------------------------------------------------------------------- agents


class AgentDecl(Strict):
    """An agent in agents/<name>.yaml."""

    name: str = ""
    description: str = ""
    model: ModelRef = "general"
    """A model role from fim.yaml, a litellm model string, or `scripted:<file>`."""
    engine: Literal["react", "dag"] = "react"
    instructions: str = ""
    """System prompt, a sandboxed Jinja2 template (`project`, `agent`, `env`, `now`)."""
    tools: list[str] = Field(default_factory=list)
    """Builtin tool names; these are pinned (never dropped by tool selection)."""
    tool_categories: list[str] = Field(default_factory=list)
    """Add every builtin tool of these categories."""
    connectors: list[str] = Field(default_factory=list)
    mcp: list[str] = Field(default_factory=list)
    skills: Literal["all"] | list[str] = Field(default_factory=list)
    workflows: list[str] = Field(default_factory=list)
    """Workflows this agent may start through `run_workflow`."""
    delegates: list[str] = Field(default_factory=list)
    """Agents this agent may hand tasks to through `call_agent`."""
    max_iterations: int = Field(default=50, ge=1)
    tool_timeout: float = Field(default=60.0, gt=0)
    """Seconds one tool call may take before it becomes an error observation."""
    tool_modes: ToolModes = Field(default_factory=ToolModes)
    hooks: list[HookSpec] = Field(default_factory=list)
    read_only: bool = False
    context_budget: int | None = None
    """Token budget of the conversation; defaults to the model's context window."""
    max_replans: int = Field(default=3, ge=0)
    """DAG engine: re-planning rounds."""


# --------------------------------------------------------------------------- connectors


class BearerAuth(Strict):
    type: Literal["bearer"]
    token: str


class ApiKeyAuth(Strict):
    type: Literal["api_key"]
    key: str
    name: str = "X-API-Key"
    """Header or query parameter name."""
    location: Literal["header", "query"] = "header"


class BasicAuth(Strict):
    type: Literal["basic"]
    username: str
    password: str


Auth = Annotated[BearerAuth | ApiKeyAuth | BasicAuth, Field(discriminator="type")]


class HttpAction(Strict):
    description: str = ""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    path: str
    """Path below base_url; `{name}` segments are filled from parameters."""
    access: Literal["read", "write", "admin"] = "read"
    requires_confirmation: bool = False
    parameters: JSONSchema = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments; path params fill `{...}`, the rest go to the query
    (GET/DELETE/HEAD) or the JSON body."""
    query: list[str] | None = None
    """Parameters sent as query string even on POST/PUT/PATCH."""
    headers: dict[str, str] = Field(default_factory=dict)


class HttpConnector(Strict):
    """An HTTP API in connectors/<name>.yaml whose actions become tools."""

    kind: Literal["http"]
    name: str = ""
    description: str = ""
    base_url: str
    auth: Auth | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = 10.0
    retries: int = 2
    """Retries for idempotent methods (GET, HEAD, PUT, DELETE) on 5xx and connect errors."""
    max_response_chars: int = 20_000
    actions: dict[str, HttpAction] = Field(default_factory=dict)


class DatabaseConnector(Strict):
    """A SQL database in connectors/<name>.yaml (any SQLAlchemy URL)."""

    kind: Literal["database"]
    name: str = ""
    description: str = ""
    url: str
    read_only: bool = True
    max_rows: int = 200
    statement_timeout: float = 10.0
    """Seconds one query may run."""
    schemas: list[str] | None = None
    """Schemas to expose (default: the connection's default schema)."""


Connector = Annotated[HttpConnector | DatabaseConnector, Field(discriminator="kind")]


# --------------------------------------------------------------------------- skills


class SkillMeta(BaseModel):
    """Front matter of skills/<name>/SKILL.md (Agent Skills format). Unknown fields such as
    `license` or `metadata` are tolerated so public skills load unchanged."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: str = ""
    description: str
    """When the skill applies; shown as the stub in progressive mode."""
    allowed_tools: list[str] | str | None = Field(default=None, alias="allowed-tools")


# --------------------------------------------------------------------------- workflows


class Retry(Strict):
    count: int = Field(default=0, ge=0)
    backoff: float = Field(default=0.5, ge=0)
    """Seconds before the first retry; doubles each attempt."""


class _Node(Strict):
    needs: list[str] = Field(default_factory=list)
    """Nodes that must finish before this one starts."""
    timeout: float | None = None
    retry: Retry = Field(default_factory=Retry)
    on_error: Literal["fail", "continue"] = "fail"
    description: str = ""


class LlmNode(_Node):
    type: Literal["llm"]
    prompt: str
    model: ModelRef = "general"
    system: str | None = None
    output_schema: JSONSchema | None = None
    """When set, the output is JSON validated against this schema."""


class AgentNode(_Node):
    type: Literal["agent"]
    agent: str
    input: str
    """Template of the task given to the agent."""


class ConnectorNode(_Node):
    type: Literal["connector"]
    connector: str
    action: str
    args: dict[str, Any] = Field(default_factory=dict)


class DatabaseNode(_Node):
    type: Literal["database"]
    connector: str
    sql: str
    params: dict[str, Any] = Field(default_factory=dict)


class McpNode(_Node):
    type: Literal["mcp"]
    server: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolNode(_Node):
    type: Literal["tool"]
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class ConditionNode(_Node):
    type: Literal["condition"]
    if_: str = Field(alias="if")
    then: str | list[str] | None = None
    else_: str | list[str] | None = Field(default=None, alias="else")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class HumanNode(_Node):
    type: Literal["human"]
    prompt: str
    input_schema: JSONSchema | None = None
    """Fields a human may supply on resume (`--input k=v`)."""


Node = Annotated[
    LlmNode
    | AgentNode
    | ConnectorNode
    | DatabaseNode
    | McpNode
    | ToolNode
    | ConditionNode
    | HumanNode,
    Field(discriminator="type"),
]


class WorkflowInput(Strict):
    type: Literal["string", "integer", "number", "boolean", "object", "array"] = "string"
    description: str = ""
    default: Any = None
    required: bool | None = None
    """Defaults to true when no default is given."""


class WorkflowDecl(Strict):
    """A deterministic DAG in workflows/<name>.yaml."""

    name: str = ""
    description: str = ""
    inputs: dict[str, WorkflowInput] = Field(default_factory=dict)
    nodes: dict[str, Node]
    outputs: dict[str, str] = Field(default_factory=dict)
    max_concurrency: int = Field(default=8, ge=1)


# --------------------------------------------------------------------------- evals


class ToolCalledSpec(Strict):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    """Subset of arguments that must match."""
    times: int | None = None


class ToolSequenceSpec(Strict):
    tools: list[str]
    mode: Literal["exact", "in_order"] = "in_order"


class JsonPathSpec(Strict):
    path: str
    equals: Any


class JudgeSpec(Strict):
    rubric: str
    model: ModelRef = "fast"


class Assertion(Strict):
    """One expectation; set exactly one key."""

    equals: str | None = None
    contains: str | None = None
    not_contains: str | None = None
    icontains: str | None = None
    regex: str | None = None
    json_schema: JSONSchema | None = None
    json_path: JsonPathSpec | None = None
    tool_called: ToolCalledSpec | None = None
    tool_not_called: str | None = None
    tool_sequence: ToolSequenceSpec | None = None
    max_iterations: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    latency_ms: float | None = None
    judge: str | JudgeSpec | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Assertion:
        set_keys = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(set_keys) != 1:
            raise ValueError(
                "an assertion needs exactly one key such as 'contains' or 'tool_called'"
                + (f", got {', '.join(set_keys)}" if set_keys else "")
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in type(self).model_fields if getattr(self, k) is not None)


class EvalCase(Strict):
    name: str
    input: str | list[dict[str, Any]] | dict[str, Any]
    """Prompt text, a list of chat messages, or workflow inputs."""
    vars: dict[str, Any] = Field(default_factory=dict)
    """Values substituted into `input` as `{{ name }}`."""
    expect: list[Assertion] = Field(default_factory=list)
    repeat: int = Field(default=1, ge=1)


class EvalSuite(Strict):
    """An eval suite in evals/<name>.yaml, targeting an agent or a workflow."""

    name: str = ""
    description: str = ""
    agent: str | None = None
    workflow: str | None = None
    threshold: float = Field(default=1.0, ge=0, le=1)
    """Pass rate the suite needs for `fim eval` to exit 0."""
    repeat: int = Field(default=1, ge=1)
    cases: list[EvalCase]

    @model_validator(mode="after")
    def _one_target(self) -> EvalSuite:
        if (self.agent is None) == (self.workflow is None):
            raise ValueError("an eval suite targets exactly one of 'agent' or 'workflow'")
        return self


KINDS: dict[str, type[BaseModel]] = {
    "project": Project,
    "agent": AgentDecl,
    "connector": HttpConnector,  # replaced by the union in schema export
    "skill": SkillMeta,
    "workflow": WorkflowDecl,
    "hook": HookDecl,
    "eval": EvalSuite,
}
