"""fim.yaml: model roles, tool modes, MCP servers, the server, the state store."""

from __future__ import annotations

import posixpath
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, PrivateAttr, Tag, field_validator
from pydantic_core import PydanticCustomError

from fim import store_url
from fim.config.schema.base import Strict, empty_list
from fim.config.schema.server import ServerSettings
from fim.config.schema.spend import Budget, Price
from fim.errors import Problem


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
    """Sampling temperature sent with every call; unset: the provider's default."""
    max_tokens: int | None = None
    """Most completion tokens one call may produce; unset: the provider's default."""
    timeout: float = 60.0
    """Seconds before one model request is abandoned."""
    max_retries: int = 2
    """Retries with exponential backoff on 429/5xx and connection errors."""
    context_window: int | None = None
    """Tokens the model accepts; defaults to what litellm knows of the model."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific keyword arguments passed through unchanged."""
    price: Price | None = None
    """Dollars per million tokens, overriding litellm's price table for this model."""
    media: list[Literal["image", "audio"]] | None = None
    """Media the model accepts as input (tool results' images and audio are sent to it);
    defaults to what litellm's model table says (`supports_vision`, `supports_audio_input`);
    `[]` keeps every medium a text placeholder."""


ModelRef = str | ModelSettings

ToolMode = Literal["progressive", "legacy"]


class ToolModes(Strict):
    """How capabilities are shown to the model: `progressive` puts short stubs in the prompt
    and details behind meta-tools; `legacy` registers every tool (skills: `inline`)."""

    skills: Literal["progressive", "inline"] | None = None
    """`progressive`: stubs, bodies through `read_skill`; `inline`: whole SKILL.md in the prompt."""
    connectors: ToolMode | None = None
    """HTTP connectors: `progressive` (the `connector` meta-tool) or `legacy` (a tool an action)."""
    databases: ToolMode | None = None
    """Databases: `progressive` (the `database` meta-tool) or `legacy` (`<db>__query` etc.)."""
    mcp: ToolMode | None = None
    """MCP servers: `progressive` (the `mcp` meta-tool) or `legacy` (a tool per server tool)."""


class ToolSelection(Strict):
    """Per request, one call to the `fast` model shows an agent with many tools only the
    ones the request needs. Set in fim.yaml; an agent's own `tool_selection` overrides the
    fields it names."""

    enabled: bool = True
    """Whether the `fast` model picks tools per request once `threshold` is passed."""
    threshold: int = Field(default=12, ge=0)
    """Above this many tools, the `fast` model picks the ones a request needs. Tools kept
    behind meta-tools (MCP tools, connector actions, database actions) count too."""
    max: int = Field(default=6, ge=1)
    """How many tools the selection keeps (pinned tools and `read_skill` come on top)."""


class StdioServer(Strict):
    """An MCP server started as a subprocess speaking stdio."""

    command: str
    """Program to start (`uvx`, `npx`, `python`...), looked up on PATH."""
    args: list[str] = Field(default_factory=empty_list)
    """Its command-line arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables it gets on top of a minimal inherited set (PATH, HOME, locale); `${VAR}` works."""
    cwd: str | None = None
    """Working directory, relative to the project root (default: the root)."""
    description: str | None = None
    """What the server offers; shown to the model in the server's stub."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds a tool call may go without an answer or a progress notification."""
    tool_timeouts: dict[str, float] = Field(default_factory=dict)
    """Per-tool overrides of `timeout`, by the server's tool name."""
    max_timeout: float = Field(default=900.0, gt=0)
    """Seconds a call may take in all, however long progress keeps flowing (time spent
    waiting for a human to answer an elicitation does not count)."""
    elicitation_timeout: float = Field(default=300.0, gt=0)
    """Seconds a human has to answer the server's question (`fim approvals`); then the
    server is answered `cancel`."""
    scope: Literal["project", "key"] = "project"
    """`key`: on a server with API keys, each key (tenant) has a process of its own, so a
    stateful server never carries one tenant's state to another's (at most 16 at once per
    server, the least recently used stopped first); `project`: one for every caller."""


class HttpServer(Strict):
    """An MCP server reached over streamable HTTP (or legacy SSE)."""

    url: str
    """Endpoint of the server, e.g. `https://docs.example/mcp`."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every request (`Authorization: Bearer ${TOKEN}`)."""
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    """`streamable_http` (the current protocol) or `sse` (the legacy one)."""
    description: str | None = None
    """What the server offers; shown to the model in the server's stub."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds a tool call may go without an answer or a progress notification."""
    tool_timeouts: dict[str, float] = Field(default_factory=dict)
    """Per-tool overrides of `timeout`, by the server's tool name."""
    max_timeout: float = Field(default=900.0, gt=0)
    """Seconds a call may take in all, however long progress keeps flowing (time spent
    waiting for a human to answer an elicitation does not count)."""
    elicitation_timeout: float = Field(default=300.0, gt=0)
    """Seconds a human has to answer the server's question (`fim approvals`); then the
    server is answered `cancel`."""
    scope: Literal["project", "key"] = "project"
    """`key`: on a server with API keys, each key (tenant) has a session of its own, so a
    stateful server never carries one tenant's state to another's (at most 16 at once per
    server, the least recently used stopped first); `project`: one for every caller."""


def _claude_entry(value: Any) -> Any:
    """Accept the Claude `.mcp.json` entry shape: `type: stdio` (command, args, env) or
    `type: http|sse` (url, headers), mapped onto fim's own fields."""
    if not isinstance(value, dict) or "type" not in value:
        return value
    entry = dict(value)
    kind = entry.pop("type")
    if kind in ("http", "streamable_http", "streamable-http") and "transport" not in entry:
        entry["transport"] = "streamable_http"
    elif kind == "sse" and "transport" not in entry:
        entry["transport"] = "sse"
    elif kind != "stdio":
        raise ValueError(f"unknown MCP server type {kind!r} (expected stdio, http or sse)")
    return entry


def _server_kind(value: Any) -> str | None:
    """Which declaration an entry is, so a wrong entry gets one error, not one per shape."""
    if isinstance(value, StdioServer | HttpServer):
        return "stdio" if isinstance(value, StdioServer) else "http"
    if not isinstance(value, dict):
        return None
    if "command" in value:
        return "stdio"
    if "url" in value:
        return "http"
    return None


McpServer = Annotated[
    Annotated[
        Annotated[StdioServer, Tag("stdio")] | Annotated[HttpServer, Tag("http")],
        Discriminator(
            _server_kind,
            custom_error_type="mcp_server_shape",
            custom_error_message="an MCP server needs `command` (stdio: command, args, env, cwd) "
            "or `url` (HTTP: url, headers, transport streamable_http|sse); the Claude "
            "`.mcp.json` entry shape with `type: stdio|http|sse` is accepted too",
        ),
    ],
    BeforeValidator(_claude_entry),
]


class A2aAgent(Strict):
    """A remote agent reached over A2A (`a2a_agents:` in fim.yaml): agents list its name in
    `delegates:` and `call_agent` sends it the task (`fim.run.remote_agents`)."""

    url: str
    """Its A2A endpoint (`https://supplier.example/a2a`, its card at
    `/.well-known/agent-card.json` under it) or its agent-card URL (ending in `.json`)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every request, the card's included (`Authorization: Bearer
    ${SUPPLIER_TOKEN}`); masked wherever text leaves fim."""
    description: str | None = None
    """What it does, shown to the delegating model (default: its card's description)."""
    timeout: float = Field(default=300.0, gt=0)
    """Seconds one call may take in all before it is a tool error."""
    access: Literal["read", "write"] = "write"
    """What a call to it does, for `readonly_guard` and `confirm`: fim cannot see the remote
    agent's own calls, so a call is a write (a read-only agent or project may not make it)
    unless this says `read`."""


class Retention(Strict):
    """How many days the state store keeps what it no longer needs (`fim serve` deletes
    the rest hourly; `fim prune` on demand); `null` keeps it forever. Nothing a run still
    waits on is deleted: runs paused, queued or running and undecided approvals stay."""

    runs: float | None = Field(default=30, gt=0)
    """Finished runs (records, event logs, owners), by their last update."""
    approvals: float | None = Field(default=30, gt=0)
    """Denied, expired and used approvals, by when they were decided."""
    audit: float | None = Field(default=365, gt=0)
    """The audit log of tool calls."""
    usage: float | None = Field(default=400, ge=1)
    """Token and cost rows (`fim usage`); at least a day, which daily budgets read. A
    session budget counts only the session's runs kept."""


class WebFetchSettings(Strict):
    allow_private: bool = False
    """Allow `web_fetch` to reach loopback and private addresses (off: SSRF guard)."""
    allow_hosts: list[str] = Field(default_factory=empty_list)
    """Hosts reachable even when private (e.g. `127.0.0.1`)."""


class Paths(Strict):
    agents: str = "agents"
    """Folder of the agent files, relative to the project root."""
    skills: str | list[str] = "skills"
    """Folder of the skill folders (each with a SKILL.md), or a list of such folders
    (`[skills, .claude/skills]` loads Claude Code's project skills too)."""
    workflows: str = "workflows"
    """Folder of the workflow files."""
    connectors: str = "connectors"
    """Folder of the connector files."""
    hooks: str = "hooks"
    """Folder of reusable hook files, hook scripts and Python hook modules."""
    evals: str = "evals"
    """Folder of the eval suites (and their cassettes in `.cassettes/`)."""

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: str | list[str]) -> str | list[str]:
        """A NUL cannot be in a file name: the folder listing raised ValueError (a
        traceback from `fim validate`) instead of pointing at the value."""
        if any("\0" in name for name in ([value] if isinstance(value, str) else value)):
            raise ValueError("a folder name cannot contain a NUL character")
        return value

    @property
    def skill_folders(self) -> list[str]:
        """`skills` as a list of folders, each once (`./skills` and `skills` are one)."""
        names = [self.skills] if isinstance(self.skills, str) else self.skills
        return list(dict.fromkeys(posixpath.normpath(name) for name in names))


class Observability(Strict):
    """Links from fim to your trace backend (the spans themselves are configured by the
    standard `OTEL_*` variables)."""

    trace_url: str | None = None
    """One trace's page in your backend, `{trace_id}` standing for the trace id, e.g.
    `http://localhost:16686/trace/{trace_id}` (Jaeger): the dev page links each run's trace
    id to it. The environment variable `FIM_TRACE_URL` wins over it."""
    capture_content: bool | None = None
    """Keep what each model call sent and got back (masked, capped) on the run's `llm_call`
    events, as `fim runs show --json`, `GET /v1/runs/{id}` and the dev page show them.
    Unset: on for `fim run` and a `fim serve` on loopback (your own machine), off for a
    server on another address unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
    is true (`fim.run.capture`)."""

    @field_validator("trace_url")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "{trace_id}" not in value or not value.lower().startswith(("http://", "https://")):
            raise ValueError(
                "trace_url is an http(s) URL with `{trace_id}` where the trace id goes, "
                "e.g. http://localhost:16686/trace/{trace_id}"
            )
        return value


class Project(Strict):
    """The project file `fim.yaml` at the root of a fim repository."""

    name: str = "fim"
    """Project name (default: the folder's); templates read it as `project.name`."""
    description: str = ""
    """What the project is for; templates read `project.description`, MCP and A2A clients see it."""
    models: dict[str, ModelRef] = Field(default_factory=dict)
    """Model roles (`general`, `fast`, ...) -> litellm strings or full settings."""
    tool_modes: ToolModes = Field(default_factory=ToolModes)
    """How capabilities are shown to models by default (an agent's own `tool_modes` wins)."""
    tool_selection: ToolSelection = Field(default_factory=ToolSelection)
    """Per-request tool selection by the `fast` model, for agents with many tools."""
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    """MCP servers by name (stdio `command` or HTTP `url`); agents list them in `mcp:`."""
    a2a_agents: dict[str, A2aAgent] = Field(default_factory=dict)
    """Remote A2A agents by name (`url`, `headers`); agents list them in `delegates:`."""
    server: ServerSettings = Field(default_factory=ServerSettings)
    """`fim serve`: address, API keys, CORS, body size, per-key limits and budgets."""
    state: str = "sqlite:///.fim/state.db"
    """State store URL: SQLite (default) or PostgreSQL."""
    retention: Retention = Field(default_factory=Retention)
    """Days the state store keeps finished runs, approvals, audit and usage rows."""
    paths: Paths = Field(default_factory=Paths)
    """Where each kind of file lives, if not in the default folders."""
    env_allowlist: list[str] = Field(default_factory=empty_list)
    """Environment variables workflow templates may read as `env.NAME`."""
    web_fetch: WebFetchSettings = Field(default_factory=WebFetchSettings)
    """Which private hosts `web_fetch` (and a sandbox with network) may reach."""
    sandbox: str = ".fim/sandbox"
    """Directory `file_ops` and `python_exec` are confined to."""
    read_only: bool = False
    """Project-wide read-only: `readonly_guard` blocks writes for every agent."""
    max_depth: int = 5
    """Cap on nested agent/workflow calls."""
    max_runs: int = Field(default=100, ge=1)
    """Cap on the agent runs one request starts in all: the first run, its delegates and
    theirs, the agent nodes of workflows they run. A model told to fan out (32 calls a
    turn, each a delegate that fans out again) would otherwise multiply runs, and spend,
    by the width of the tree at every level."""
    budget: Budget | None = None
    """Spend limit of every run of every agent (an agent's own `budget` applies too)."""
    observability: Observability = Field(default_factory=Observability)
    """Links to your trace backend (`trace_url`)."""
    _serve_only_unset: tuple[tuple[str, Problem], ...] = PrivateAttr(default=())
    """`state:`/`server:` and models' settings (fim.yaml's and the declaration files') whose
    `${VAR}` is unset here, as (setting, warning): set by the loader where this command does
    not need them (`fim.config.serving`)."""

    @field_validator("state")
    @classmethod
    def _store(cls, value: str) -> str:
        """A store fim can open (`fim.store_url`, the one reading of the scheme): an unknown
        one failed only at `fim serve`'s start, with a traceback (attack-59 F5). Empty is
        left to the loader: an unset `${VAR}` is "" here, and the loader names the variable."""
        why = store_url.unsupported(value) if value.strip() else None
        if why is not None:
            raise PydanticCustomError("store_url", why, {"hint": store_url.HINT})
        return value
