"""agents/*.yaml and the hooks they declare (hooks/*.yaml for reusable ones)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from fim.config import agent_words
from fim.config.schema.base import Strict, empty_list
from fim.config.schema.project import ModelRef, ToolModes, ToolSelection
from fim.config.schema.spend import Budget


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
    env: list[str] | dict[str, str] = Field(default_factory=empty_list)
    """Variables a command hook gets besides the protocol's (PATH, HOME, LANG, CLAUDE_*,
    FIM_*): names passed through from fim's environment, or a mapping of name to value."""
    optional: bool = False
    """A SessionStart hook that fails lets the session start without its context (with a
    notice) instead of refusing it. Tool hooks cannot be optional: guards fail closed."""
    type: Literal["command"] | None = None
    """Claude Code's `type: command` of a hook pasted from settings.json: accepted and
    ignored, as `command:` says it (its `prompt` and `agent` hooks have no fim kind)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _claude_type(cls, data: Any) -> Any:
        """A hook pasted from Claude Code's settings.json keeps its `type:`: `command` is
        what `command:` already says; `prompt` and `agent` hooks (a model decides) are
        refused by name, not as an unknown value."""
        kind = data.get("type") if isinstance(data, dict) else None
        if isinstance(kind, str) and kind != "command":
            raise PydanticCustomError(
                "hook_type",
                "Claude Code's `type: {kind}` hooks are not supported by fim",
                {
                    "kind": kind,
                    "hint": "fim runs `command:`, `python: module:Class` and builtin "
                    "(`use:`) hooks; a `python:` hook may ask a model itself",
                },
            )
        return data

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> HookSpec:
        kinds = [k for k in ("use", "command", "python", "ref") if getattr(self, k)]
        if len(kinds) != 1:
            raise ValueError(
                "a hook needs exactly one of 'use', 'command', 'python' or 'ref'"
                + (f", got {', '.join(kinds)}" if kinds else "")
            )
        if self.type == "command" and self.command is None:
            raise ValueError(f"`type: command` goes with `command:`, not with '{kinds[0]}'")
        if self.optional and self.event not in (None, "SessionStart"):
            raise ValueError(
                f"only SessionStart hooks may be optional; a {self.event} hook guards tool "
                "calls and must fail closed (remove optional: true)"
            )
        return self


class HookDecl(HookSpec):
    """A reusable hook in hooks/<name>.yaml, referenced from agents with `ref: <name>`."""

    name: str = ""
    """Name agents use in `ref:` (default: the file name)."""
    description: str = ""
    """What the hook is for; shown by `fim list`."""


# --------------------------------------------------------------------------- agents


class SandboxSettings(Strict):
    """How `python_exec` and `shell` run for this agent (the OS sandbox, fim/tools/sandbox/).

    Not to be confused with fim.yaml's `sandbox:`, the folder file tools are confined to."""

    env: dict[str, str] = Field(default_factory=dict)
    """Variables the sandboxed programs see, besides PATH, HOME, TMPDIR and LANG; `${VAR}`
    values are interpolated from fim's environment (and masked). Nothing else is passed."""
    memory_mb: int = Field(default=512, ge=32, le=65_536)
    """Memory of one process and of the whole process tree, in MB."""
    max_processes: int = Field(default=64, ge=4, le=4096)
    """Processes and threads the sandboxed programs may have at once."""
    folder_mb: int = Field(default=2048, ge=16, le=1_048_576)
    """What the sandbox folder may hold, in MB (the key's own on a keyed server, else the
    project's; files stay there between calls): a call that takes it past this is
    killed, one that finds it full may still read and delete."""
    network: bool = False
    """HTTP(S) out through fim's proxy, behind web_fetch's guard (no loopback or private
    addresses unless fim.yaml's `web_fetch` allows them); off: no network at all."""
    project: Literal["none", "read"] = "none"
    """`read`: the project folder is visible read-only at `/project` (the working
    directory), without fim's state (`.fim/`, the sandbox folders, a SQLite store), so
    `git log` or `grep` work on the repository; files are written to `$HOME` (the scratch
    folder). Never writable: hooks and agent files there run outside the sandbox."""

    @model_validator(mode="after")
    def _env_names(self) -> SandboxSettings:
        for name in self.env:
            if not (name.isidentifier() and name.isascii()) or name in ("PATH", "HOME", "TMPDIR"):
                raise ValueError(f"'{name}' cannot be declared in sandbox.env")
        return self


class AgentDecl(Strict):
    """An agent in agents/<name>.yaml."""

    name: str = ""
    """Agent name (default: the file name); letters, digits, `_` and `-`."""
    description: str = ""
    """What the agent does; shown to callers, delegating agents and MCP clients."""
    model: ModelRef = "general"
    """A model role from fim.yaml, a litellm model string, or `scripted:<file>`."""
    engine: Literal["react", "dag"] = "react"
    """`react` (think, call tools, repeat) or `dag` (plan, parallel steps, check, re-plan)."""
    instructions: str = ""
    """System prompt, a sandboxed Jinja2 template (`project`, `agent`, `env`, `now`)."""
    tools: list[str] = Field(default_factory=empty_list)
    """Builtin tool names, or `module:function` for a function of the project's hooks/
    folder (`mytools:add`: tool `add`); these are pinned (never dropped by tool selection)."""
    tool_categories: list[str] = Field(default_factory=empty_list)
    """Add every builtin tool of these categories."""
    connectors: list[str] = Field(default_factory=empty_list)
    """Connectors (connectors/<name>.yaml) whose actions or queries this agent may use."""
    mcp: list[str] = Field(default_factory=empty_list)
    """MCP servers (fim.yaml's `mcp_servers`) whose tools this agent may call."""
    skills: Literal["all"] | list[str] = Field(default_factory=empty_list)
    """Skills (skills/<name>/SKILL.md) this agent may read, or `all`."""
    workflows: list[str] = Field(default_factory=empty_list)
    """Workflows this agent may start through `run_workflow`."""
    delegates: list[str] = Field(default_factory=empty_list)
    """Agents this agent may hand tasks to through `call_agent`."""
    max_iterations: int = Field(default=50, ge=1)
    """Model calls one run may make; past it the run stops without a final answer."""
    concurrency: int | None = Field(default=None, ge=1)
    """Background runs of this agent that `fim worker` processes execute at once, across
    all of them (procrastinate locks). None: no limit."""
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    """Environment and limits of `python_exec` and `shell` (no network)."""
    tool_timeout: float = Field(default=60.0, gt=0)
    """Seconds one tool call may take before it becomes an error observation."""
    tool_modes: ToolModes = Field(default_factory=ToolModes)
    """Overrides fim.yaml's `tool_modes` for this agent (`legacy`, `inline`...)."""
    tool_selection: ToolSelection | None = None
    """Overrides the fields of fim.yaml's `tool_selection` it names, e.g. `{enabled: false}`
    for an agent whose every tool matters, or `{max: 3}`."""
    hooks: list[HookSpec] = Field(default_factory=empty_list)
    """Hooks on this agent's session and tool calls: `use`, `command`, `python` or `ref` each."""
    read_only: bool = False
    """Always add `readonly_guard`: no write/admin actions, SQL that only reads."""
    mask_observations: bool = True
    """Mask known secrets (`${VAR}` values, literal credentials) in tool results before
    they are sent to the model provider; a `notice` event says when it happened."""
    context_budget: int | None = None
    """Token budget of the conversation; defaults to the model's context window."""
    budget: Budget | None = None
    """Spend limit of one run of this agent (`max_tokens`, `max_cost_usd`)."""
    max_replans: int = Field(default=3, ge=0)
    """DAG engine: re-planning rounds."""
    output_schema: dict[str, Any] | str | None = None
    """Structured output: the final answer must be JSON valid against this inline JSON
    Schema, or against the pydantic model `module:Class` in the project's hooks/ folder
    (one retry with the validation error, then the run fails). Works with tools."""
    client_sampling: bool = True
    """Whether OpenAI-endpoint callers may set sampling fields (temperature, top_p,
    max_tokens, stop, seed, penalties) for this agent's model; false answers them a 400."""

    @field_validator(
        "tools", "tool_categories", "connectors", "mcp", "workflows", "delegates", mode="before"
    )
    @classmethod
    def _yaml_list(cls, value: Any) -> Any:
        """`tools: Read, Grep` (a Claude Code subagent's front matter) is one string: the
        hint writes it as the YAML list it means."""
        if isinstance(value, str):
            items = [item.strip() for item in value.split(",") if item.strip()]
            raise PydanticCustomError(
                "list_type",
                "expected a list",
                {"hint": f"write a YAML list: [{', '.join(items)}], or one `- item` a line"},
            )
        return value

    @field_validator("mcp", mode="before")
    @classmethod
    def _server_names(cls, value: Any) -> Any:
        """A server itself in the list (`{command: python, args: [...]}`): its hint says
        where servers are declared (`agent_words.inline_server_hint`)."""
        hint = agent_words.inline_server_hint(value)
        if hint is not None:
            raise PydanticCustomError("mcp_inline", "expected MCP server names", {"hint": hint})
        return value

    @classmethod
    def unknown_key_hint(cls, key: str, value: Any) -> str | None:
        """ADK's and openai-agents' keys of an agent in fim's words (`sub_agents` is
        `delegates`, `output_key` has no counterpart): `fim.config.agent_words`."""
        return agent_words.agent_hint(key, value)
