"""The plan of one run: everything an engine is built from, decided once.

`build_plan` takes what the capability providers give the agent for this request
(`fim.run.assembly.assemble`: tools, prompt sections, pinned tools, tools kept behind
meta-tools), resolves the tool modes and the tool-selection settings, builds the model (with
the caller's overrides and the budget meter), the hooks, the context guard and the output
contract, and returns a frozen `RunPlan`. `build_engine` turns a plan into a ReAct or DAG
engine, the only place an agent's engine is constructed. Every surface (CLI, HTTP,
delegation, workflow agent nodes, eval) runs through `fim.run.agent.run_agent`, which uses
these two functions; `fim show agent NAME --prompt` renders the same plan
(`fim.run.prompt_report`), so what the report shows is what the engine sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from fim.build.snapshot import Snapshot
from fim.config.schema import ToolSelection
from fim.engines.dag import DagEngine
from fim.engines.react import ReactEngine
from fim.engines.tool_turn import no_mask
from fim.errors import RunError
from fim.events import Event, HookRunner, NoHooks
from fim.hooks import build_hooks
from fim.hooks.stacked import Stacked
from fim.llm import catalog, fast_model, make_model
from fim.masking import known
from fim.run.assembly import assemble, meta_tools
from fim.run.capture import capture_content
from fim.run.context import ContextGuard, guard_for
from fim.run.limits import run_budgets
from fim.run.metering import metered
from fim.run.overrides import OverriddenModel, RunOverrides, output_contract
from fim.run.selection import (
    ALWAYS_KEPT,
    SelectionOutcome,
    first_turn_selection,
    needed,
    pointless,
    select_with,
    selection_settings,
)
from fim.run.services import ModeKind, RunContext
from fim.run.tree import start_spend
from fim.structured import OutputContract
from fim.tools.registry import ToolRegistry
from fim.tools.view import view_of
from fim.types import CallView, Model

MODE_KINDS: tuple[ModeKind, ...] = ("skills", "connectors", "databases", "mcp")

TurnCallback = Callable[[], Awaitable[list[Event]]]
"""Called by the engine before each model call; returns events to yield (a Notice)."""


@dataclass(frozen=True)
class SelectionPlan:
    """The tool-selection decision of one run: the agent's settings over fim.yaml's, the
    tools it must keep, and how many tools it has (shown plus behind meta-tools)."""

    settings: ToolSelection
    pinned: frozenset[str]
    capabilities: int
    request: str
    fast_model: Callable[[], Model]
    """The `fast` role's model (the agent's own without one), built only when needed."""

    def needed(self, registry: ToolRegistry) -> bool:
        """Whether the agent is above the selection threshold."""
        return needed(registry, self.settings.threshold, self.capabilities)

    def skip(self, registry: ToolRegistry) -> str | None:
        """Why selection would change nothing (None: it runs when enabled)."""
        settings = self.settings
        return pointless(
            registry, set(self.pinned), settings.max, settings.threshold, self.capabilities
        )

    def kept(self, registry: ToolRegistry) -> list[str]:
        """The tools selection always keeps: the pinned ones and the meta-tools."""
        return [n for n in registry.names if n in self.pinned or n in ALWAYS_KEPT]

    async def choose(self, registry: ToolRegistry) -> SelectionOutcome:
        """Run selection on `registry` for the request now, as the first turn would."""
        return await select_with(
            self.fast_model,
            self.request,
            registry,
            pinned=set(self.pinned),
            max_tools=self.settings.max,
            threshold=self.settings.threshold,
            capabilities=self.capabilities,
        )

    def first_turn(self, registry: ToolRegistry, run_id: str) -> TurnCallback:
        """The engine callback that selects the tools on `registry` before the first call."""
        return first_turn_selection(
            self.fast_model,
            self.request,
            registry,
            pinned=set(self.pinned),
            max_tools=self.settings.max,
            threshold=self.settings.threshold,
            capabilities=self.capabilities,
            run_id=run_id,
        )


@dataclass(frozen=True)
class RunPlan:
    """Everything one run's engine is built from. Frozen: what is decided here is not
    patched later; the registry itself changes during the run (selection restricts it,
    `request_tools` and skills load tools into it), which is why it is built per run."""

    ctx: RunContext
    request: str
    engine: Literal["react", "dag"]
    model: Model
    """The working model, wrapped with the caller's overrides and the budget meter."""
    model_name: str | None
    """The model string (for token counting); None when the role does not resolve."""
    sections: tuple[tuple[str, str], ...]
    """The system prompt, section by section (instructions, areas' stubs, output)."""
    registry: ToolRegistry
    modes: Mapping[str, str]
    """The tool mode of each area (`progressive` or `legacy`; skills also `inline`)."""
    meta_tools: tuple[str, ...]
    """Tools that stand in front of others (`connector`, `database`, `mcp`, `read_skill`)."""
    selection: SelectionPlan
    """Tool selection's settings and inputs (`selection.settings.enabled` says if it runs)."""
    context_guard: ContextGuard
    hooks: HookRunner
    contract: OutputContract | None
    on_turn: tuple[TurnCallback, ...]
    """Called in order before each model call (tool selection runs on the first)."""
    stream: bool = False
    client_tools: frozenset[str] = frozenset()
    max_iterations: int = 50
    tool_timeout: float = 60.0
    max_replans: int = 3
    metadata: Mapping[str, Any] = field(default_factory=dict)
    capture: bool = False
    """Whether the run keeps its content (`fim.run.capture.capture_content`), decided once:
    its `llm_call` events, and its spans when the OpenTelemetry variable asks too."""

    @property
    def system_prompt(self) -> str:
        return "\n\n".join(text for _, text in self.sections if text.strip())

    @property
    def snapshot(self) -> Snapshot:
        return self.ctx.snapshot


def hooks_of(ctx: RunContext) -> HookRunner:
    """The hooks a run of `ctx.agent` holds to: its own (read-only holds with hooks off, in
    eval, too), after the chain of the run that started it (`ctx.guard`)."""
    snapshot, agent = ctx.snapshot, ctx.agent
    hooks: HookRunner = NoHooks()
    if agent.hooks or agent.read_only or snapshot.project.read_only:
        hooks = build_hooks(ctx)
    if ctx.guard is not None and type(ctx.guard) is not NoHooks:
        # a caller's chain; with hooks off (eval) that is its read-only guard, if any
        hooks = Stacked(ctx.guard, hooks)
    return hooks


async def build_plan(
    ctx: RunContext,
    request: str = "",
    *,
    model: Model | None = None,
    stream: bool = False,
    overrides: RunOverrides | None = None,
) -> RunPlan:
    """Decide everything about one run of `ctx.agent` for `request`: tools, prompt, tool
    modes and selection, model, hooks, context guard, output contract and limits. Also
    sets `ctx.hooks` (what a delegate or workflow the run starts passes on as its guard)."""
    snapshot, agent = ctx.snapshot, ctx.agent
    if ctx.depth > snapshot.project.max_depth:
        raise RunError(
            f"agent '{agent.name}' would run at depth {ctx.depth}, above max_depth "
            f"{snapshot.project.max_depth}",
            hint="a delegation or workflow chain is recursing; raise max_depth in fim.yaml "
            "if intended",
        )
    if not catalog.table_loaded():  # a ~1 MB JSON file: read off the event loop, once
        await asyncio.to_thread(catalog.table)
    assembly = await assemble(ctx)
    if model is None:
        model = make_model(snapshot.model_settings(agent.model), snapshot.root)
    if overrides is not None and overrides.wraps_model():
        model = OverriddenModel(model, overrides)
    ctx.spend = start_spend(agent, run_budgets(snapshot, agent), snapshot.project.max_runs, ctx)
    model = metered(model, snapshot, agent, ctx.services, ctx.session, ctx.spend, run_id=ctx.run_id)
    contract = (overrides.output if overrides else None) or output_contract(
        snapshot, agent.output_schema
    )
    if agent.engine == "dag" and (contract is not None or (overrides and overrides.client_tools)):
        raise RunError(
            f"agent '{agent.name}' uses engine: dag, which supports neither structured output "
            "nor client-side tools",
            hint="use engine: react for output_schema, response_format and client tools",
        )
    sections = list(assembly.sections)
    if contract is not None:
        # the answer is checked whole before anyone sees it, so it is not streamed
        sections.append(("output", contract.instruction()))
        stream = False
    ctx.hooks = hooks = hooks_of(ctx)

    def fast() -> Model:
        """The run's `fast` model, held to the run's budgets like its own model."""
        made = fast_model(snapshot, agent)
        return metered(
            made, snapshot, agent, ctx.services, ctx.session, ctx.spend, True, ctx.run_id
        )

    ctx.fast = fast
    selection = SelectionPlan(
        settings=selection_settings(snapshot.project.tool_selection, agent.tool_selection),
        pinned=frozenset(assembly.pinned),
        capabilities=assembly.capabilities,
        request=request,
        fast_model=fast,
    )
    on_turn: tuple[TurnCallback, ...] = ()
    if selection.settings.enabled:
        on_turn = (selection.first_turn(assembly.registry, ctx.run_id),)
    modes: Mapping[str, str] = MappingProxyType({k: ctx.mode(k) for k in MODE_KINDS})
    try:
        model_name: str | None = snapshot.model_settings(agent.model).model
    except RunError:  # a model handed in by the caller for a role fim.yaml lacks
        model_name = None
    return RunPlan(
        ctx=ctx,
        request=request,
        engine=agent.engine,
        model=model,
        model_name=model_name,
        sections=tuple(sections),
        registry=assembly.registry,
        modes=modes,
        meta_tools=meta_tools(assembly, modes),
        selection=selection,
        context_guard=guard_for(snapshot, agent, fast),
        hooks=hooks,
        contract=contract,
        on_turn=on_turn,
        stream=stream,
        client_tools=overrides.client_tool_names if overrides else frozenset(),
        max_iterations=agent.max_iterations,
        tool_timeout=agent.tool_timeout,
        max_replans=agent.max_replans,
        capture=capture_content(snapshot.project, ctx.services),
        metadata=MappingProxyType(
            {
                "agent_read_only": agent.read_only,
                "project_read_only": snapshot.project.read_only,
                "depth": ctx.depth,
            }
        ),
    )


def build_engine(plan: RunPlan) -> ReactEngine | DagEngine:
    """The engine of `plan`: a ReactEngine, inside a DagEngine for `engine: dag`. The one
    place an agent's engine is constructed."""
    snapshot = plan.snapshot
    react = ReactEngine(
        model=plan.model,
        registry=plan.registry,
        system_prompt=plan.system_prompt,
        agent=plan.ctx.agent.name,
        run_id=plan.ctx.run_id,
        hooks=plan.hooks,
        max_iterations=plan.max_iterations,
        tool_timeout=plan.tool_timeout,
        stream=plan.stream,
        snapshot_version=snapshot.version,
        mask=_observation_mask(snapshot, plan.hooks),
        mask_observations=plan.ctx.agent.mask_observations,
        call_view=_call_view(plan.registry),
        fit_context=plan.context_guard.bind(plan.registry.specs),
        metadata=dict(plan.metadata),
        on_turn=_chain(plan.on_turn),
        transcript=plan.ctx.transcript,
        views=plan.ctx.views,
        finalizer=plan.contract,
        client_tools=plan.client_tools,
        capture=plan.capture,
    )
    if plan.engine == "dag":
        return DagEngine(base=react, max_replans=plan.max_replans)
    return react


def _chain(callbacks: tuple[TurnCallback, ...]) -> TurnCallback | None:
    """One engine `on_turn` running `callbacks` in order, their events concatenated."""
    if not callbacks:
        return None
    if len(callbacks) == 1:
        return callbacks[0]

    async def on_turn() -> list[Event]:
        events: list[Event] = []
        for callback in callbacks:
            events += await callback()
        return events

    return on_turn


def _call_view(registry: ToolRegistry) -> Callable[[str, dict[str, Any]], CallView]:
    """Let hooks see a call as its real target (`crm__create_lead` with the action's own
    arguments and metadata), whatever route it took; `view_of` raises when it cannot tell,
    and the engine then blocks the call."""

    def view(name: str, args: dict[str, Any]) -> CallView:
        tool = registry.get(name)
        if tool is None:
            return CallView(name, args)
        return view_of(tool, args)

    return view


def _observation_mask(snapshot: Snapshot, hooks: Any) -> Callable[[str], str]:
    """How tool results are masked before the model sees them: with every secret the
    process knows when the text is masked (`fim.masking.known`: the snapshot's, the
    provider keys fim resolved, and credentials a SessionStart hook exports during this
    very run, which reach the `shell` tool's environment), or not at all when there is
    nothing to mask and no SessionStart hook could add something (the engine then skips
    the work)."""
    if not known() and not _may_export(hooks):
        return no_mask
    return _mask_known


def _mask_known(text: str) -> str:
    return known().text(text)


def _may_export(hooks: Any) -> bool:
    if isinstance(hooks, NoHooks):
        return False
    for_point = getattr(hooks, "for_point", None)
    return for_point is None or bool(for_point("SessionStart"))


__all__ = [
    "MODE_KINDS",
    "RunPlan",
    "SelectionPlan",
    "build_engine",
    "build_plan",
]
