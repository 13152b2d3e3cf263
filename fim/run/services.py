"""Per-run assembly: which tools, prompt sections and hooks an agent gets for one request.

Each capability area (builtins, connectors, databases, MCP, skills, workflows, delegation)
exposes a `provide(ctx) -> Provision` function; `fim.run.assembly.assemble` asks each one the
`Services` of the process names. The surface that builds the `Services` hands the list in
(`fim.capabilities.CAPABILITIES`): two areas, delegation and the workflow tool, run agents
themselves, so a list kept down here would import upwards into a circle. Providers are
imported lazily by dotted path so an agent without MCP never imports the MCP SDK.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl
from fim.locks import current_owner
from fim.types import Tool

ModeKind = Literal["skills", "connectors", "databases", "mcp"]
_DEFAULT_MODES = {
    "skills": "progressive",
    "connectors": "progressive",
    "databases": "progressive",
    "mcp": "progressive",
}
_ENV_MODES = {
    "skills": "FIM_SKILL_TOOL_MODE",
    "connectors": "FIM_CONNECTOR_TOOL_MODE",
    "databases": "FIM_DATABASE_TOOL_MODE",
    "mcp": "FIM_MCP_TOOL_MODE",
}


def resolve_mode(kind: ModeKind, snapshot: Snapshot, agent: AgentDecl) -> str:
    """Precedence: agent `tool_modes` > env `FIM_*_TOOL_MODE` > fim.yaml > default."""
    value = getattr(agent.tool_modes, kind)
    if value:
        return value
    env = os.environ.get(_ENV_MODES[kind], "").strip().lower()
    if env:
        return env
    return getattr(snapshot.project.tool_modes, kind) or _DEFAULT_MODES[kind]


@dataclass
class Services:
    """Long-lived resources shared by runs: the state store, MCP sessions, HTTP clients.

    One Services lives as long as the process (CLI command or server); a reload keeps it,
    and each area's cache is keyed by its declaration so a changed declaration gets a fresh
    client while unchanged ones are reused.
    """

    root: Any = None
    state_url: str = "sqlite:///.fim/state.db"
    record_usage: bool = True
    """Whether finished runs write their usage to the state store; `fim eval` replaying
    cassettes spends nothing, so it records nothing (and never opens the store for it)."""
    providers: tuple[str, ...] = ()
    """The capability areas runs are assembled from, as `module:function` paths imported on
    first use; the surface that composes the process hands them in
    (`fim.capabilities.CAPABILITIES`). None at all is a wiring mistake and fails the run."""
    local: bool = False
    """Whether the runs are the developer's own (`fim run`, `fim runs rerun`, `fim workflow
    run`, `fim eval`, `fim.testing`, `fim serve` on loopback): model calls' content is then
    kept in run events unless fim.yaml says otherwise (`fim.run.capture`). False unless the
    surface says so (attack-61 F2): a `fim worker`, a job, `fim mcp serve` serve others."""
    cache: dict[str, Any] = field(default_factory=dict)
    closers: list[Callable[[], Any]] = field(default_factory=list)

    def get(
        self, key: str, factory: Callable[[], Any], closer: Callable[[Any], Any] | None = None
    ) -> Any:
        """Return the cached resource under `key`, creating it on first use."""
        if key not in self.cache:
            value = factory()
            self.cache[key] = value
            if closer is not None:
                self.closers.append(lambda: closer(value))
        return self.cache[key]

    async def aclose(self) -> None:
        """Run every closer, last registered first: one that fails does not keep the
        others from closing (the first failure is raised once all have run)."""
        failed: Exception | None = None
        for close in reversed(self.closers):
            try:
                result = close()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                failed = failed or exc
        self.closers.clear()
        self.cache.clear()
        compat = sys.modules.get("fim.llm.openai_compat")
        if compat is not None:  # the pooled model session of this event loop
            await compat.aclose_clients()
        if failed is not None:
            raise failed


@dataclass
class RunContext:
    """What a provider or hook may know about the run being assembled."""

    snapshot: Snapshot
    agent: AgentDecl
    services: Services
    run_id: str = field(default_factory=lambda: os.urandom(6).hex())
    """12 random hex digits, as `uuid.uuid4().hex[:12]` gave (those digits of a version-4
    UUID are all random) without building the UUID: one `getrandom` either way."""
    depth: int = 0
    hooks_enabled: bool = True
    """False only on the eval path (DESIGN §4): the one switch for bypassing hooks."""
    parents: tuple[str, ...] = ()
    """Agents/workflows above this run, for reentrancy and depth guards."""
    transcript: list[Any] = field(default_factory=list)
    """The run's messages so far (kept by the engine), for hooks' `transcript_path`."""
    transcript_written: int = 0
    """How many of them its transcript file holds (`fim.hooks.command_input`)."""
    views: dict[str, Any] = field(default_factory=dict)
    """The hook view (`fim.types.CallView`) of each of the run's tool calls by call id,
    recorded when the model made the call (kept by the engine): its transcript shows a
    meta-tool's call as the target hooks judge (`fim.hooks.transcript_file`)."""
    session_env: dict[str, str] = field(default_factory=dict)
    """Variables SessionStart hooks exported through CLAUDE_ENV_FILE, for the `shell` tool."""
    guard: Any = None
    """The hook runner of the run that started this one (a delegate's caller, the agent that
    ran a workflow): its hooks hold here too."""
    hooks: Any = None
    """This run's hook runner, set when its engine is built (what it passes on as `guard`)."""
    session: str | None = None
    """The session (conversation) this run continues, if any: its session budgets count the
    session's recorded spend, and delegates it starts count toward the same session."""
    spend: Any = None
    """This run's `fim.run.tree.RunSpend` (set when its plan is built): its place in the
    tree of runs one request started."""
    fast: Callable[[], Any] | None = None
    """Makes the run's `fast` model, held to its budgets (set when its plan is built; MCP
    sampling asks it)."""
    owner: str = field(default_factory=current_owner.get)
    """The key (tenant) hash the run is for, "" for none: by default the owner of the work
    going on (the run that delegates, the workflow whose node this is). A keyed run's
    sandbox folder is its key's own (`fim.tools.builtin._common.sandbox_dir`)."""

    def mode(self, kind: ModeKind) -> str:
        return resolve_mode(kind, self.snapshot, self.agent)


@dataclass
class Provision:
    """What one capability area contributes to a run."""

    tools: list[Tool] = field(default_factory=list)
    prompt: str | None = None
    """A section appended to the system prompt (stubs in progressive mode)."""
    pinned: list[str] = field(default_factory=list)
    """Tool names tool selection must always keep."""
    hidden: int = 0
    """Tools this area keeps behind its meta-tools (MCP tools behind `mcp`, HTTP actions
    behind `connector`): the agent has them although the model is not shown them, so they
    count toward tool selection's threshold."""


def load_provider(path: str) -> Callable[[RunContext], Provision | None]:
    """The provider function at `module:attr` (every run asks for every provider, so an
    imported module is taken from sys.modules without importlib's machinery)."""
    module, _, attr = path.partition(":")
    return getattr(sys.modules.get(module) or importlib.import_module(module), attr)
