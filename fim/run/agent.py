"""Running a declared agent: assemble its prompt, tools and hooks, then drive an engine.

This is the one entry point every surface uses (CLI, HTTP, workflow agent nodes,
delegation, eval), so hooks, tool modes and depth guards behave the same everywhere.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl
from fim.errors import RunError
from fim.events import Event, RunFinished
from fim.run.auto import resolve_agent
from fim.run.services import PROVIDERS, Provision, RunContext, Services, load_provider
from fim.tools.registry import ToolRegistry
from fim.tools.view import view_of
from fim.types import CallView, Message, Model

if TYPE_CHECKING:
    from fim.run.overrides import RunOverrides


@dataclass
class Assembly:
    """What the model of one run will see: prompt sections and the tool registry."""

    sections: list[tuple[str, str]]
    registry: ToolRegistry
    pinned: set[str] = field(default_factory=set)
    provisions: list[Provision] = field(default_factory=list)

    @property
    def capabilities(self) -> int:
        """Tools the agent has: the ones shown plus the ones behind meta-tools. This is
        what tool selection's threshold compares with, so a hub whose breadth sits behind
        a few meta-tools still gets its builtins trimmed per request."""
        return len(self.registry) + sum(p.hidden for p in self.provisions)

    @property
    def system_prompt(self) -> str:
        return "\n\n".join(text for _, text in self.sections if text.strip())


def render_instructions(snapshot: Snapshot, ctx: RunContext) -> str:
    """Render the agent's instructions as a sandboxed Jinja2 template."""
    agent = ctx.agent
    if "{" not in agent.instructions:
        return agent.instructions.strip()
    from jinja2 import StrictUndefined
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    allowed = {k: os.environ.get(k, "") for k in snapshot.project.env_allowlist}
    try:
        return (
            env.from_string(agent.instructions)
            .render(
                project={
                    "name": snapshot.project.name,
                    "description": snapshot.project.description,
                },
                agent={"name": agent.name, "description": agent.description},
                env=allowed,
                now=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            )
            .strip()
        )
    except TemplateError as exc:
        src = snapshot.source("agent", agent.name)
        raise RunError(f"{src.path}: cannot render instructions: {exc}") from None


async def assemble(ctx: RunContext) -> Assembly:
    """Ask every capability provider what this agent gets for this run (some providers,
    such as MCP, await their servers' tool lists)."""
    registry = ToolRegistry()
    sections: list[tuple[str, str]] = [("instructions", render_instructions(ctx.snapshot, ctx))]
    pinned: set[str] = set()
    provisions: list[Provision] = []
    for path in PROVIDERS:
        provision = load_provider(path)(ctx)
        if inspect.isawaitable(provision):
            provision = await provision
        if provision is None:
            continue
        provisions.append(provision)
        for tool in provision.tools:
            registry.add(tool)
        pinned.update(provision.pinned)
        if provision.prompt:
            sections.append((_section_title(path), provision.prompt))
    return Assembly(sections=sections, registry=registry, pinned=pinned, provisions=provisions)


def _section_title(provider: str) -> str:
    """`fim.workflows.tool:provide` -> `workflows`, `fim.run.skills:provide` -> `skills`:
    the area a prompt section comes from."""
    parts = provider.split(":")[0].split(".")
    if parts[0] != "fim" or len(parts) < 2:
        return parts[-1]
    area = parts[1:]
    return area[1] if area[0] == "run" and len(area) > 1 else area[0]


def _call_view(registry: ToolRegistry):
    """Let hooks see a call as its real target (`crm__create_lead` with the action's own
    arguments and metadata), whatever route it took; `view_of` raises when it cannot tell,
    and the engine then blocks the call."""

    def view(name: str, args: dict[str, Any]) -> CallView:
        tool = registry.get(name)
        if tool is None:
            return CallView(name, args)
        return view_of(tool, args)

    return view


async def make_engine(
    ctx: RunContext,
    request: str = "",
    *,
    model: Model | None = None,
    stream: bool = False,
    overrides: RunOverrides | None = None,
):
    """Build the engine of one run (react or dag): tools, hooks, tool selection for
    `request`, the context guard, and what the caller overrides (`fim.run.overrides`)."""
    from fim.engines.react import NoHooks, ReactEngine
    from fim.llm import make_model
    from fim.run.overrides import OverriddenModel, output_contract
    from fim.run.spend import metered

    snapshot, agent = ctx.snapshot, ctx.agent
    if ctx.depth > snapshot.project.max_depth:
        raise RunError(
            f"agent '{agent.name}' would run at depth {ctx.depth}, above max_depth "
            f"{snapshot.project.max_depth}",
            hint="a delegation or workflow chain is recursing; raise max_depth in fim.yaml "
            "if intended",
        )
    assembly = await assemble(ctx)
    if model is None:
        model = make_model(snapshot.model_settings(agent.model), snapshot.root)
    if overrides is not None and overrides.wraps_model():
        model = OverriddenModel(model, overrides)
    model = metered(model, snapshot, agent, ctx.services, session=ctx.session)
    contract = (overrides.output if overrides else None) or output_contract(
        snapshot, agent.output_schema
    )
    if agent.engine == "dag" and (contract is not None or (overrides and overrides.client_tools)):
        raise RunError(
            f"agent '{agent.name}' uses engine: dag, which supports neither structured output "
            "nor client-side tools",
            hint="use engine: react for output_schema, response_format and client tools",
        )
    system_prompt = assembly.system_prompt
    if contract is not None:
        # the answer is checked whole before anyone sees it, so it is not streamed
        system_prompt = f"{system_prompt}\n\n{contract.instruction()}".strip()
        stream = False
    hooks: Any = NoHooks()
    if ctx.hooks_enabled and agent.hooks:
        from fim.hooks import build_hooks

        hooks = build_hooks(ctx)
    if ctx.hooks_enabled and ctx.guard is not None:
        from fim.hooks.runner import Stacked

        hooks = Stacked(ctx.guard, hooks)
    ctx.hooks = hooks
    react = ReactEngine(
        model=model,
        registry=assembly.registry,
        system_prompt=system_prompt,
        agent=agent.name,
        run_id=ctx.run_id,
        hooks=hooks,
        max_iterations=agent.max_iterations,
        tool_timeout=agent.tool_timeout,
        stream=stream,
        snapshot_version=snapshot.version,
        mask=snapshot.mask,
        mask_observations=agent.mask_observations,
        call_view=_call_view(assembly.registry),
        transcript=ctx.transcript,
        finalizer=contract,
        client_tools=overrides.client_tool_names if overrides else frozenset(),
        metadata={
            "agent_read_only": agent.read_only,
            "project_read_only": snapshot.project.read_only,
            "depth": ctx.depth,
        },
    )
    from fim.run.selection import attach

    attach(react, ctx, request, assembly.pinned, capabilities=assembly.capabilities)
    if agent.engine == "dag":
        from fim.engines.dag import DagEngine

        return DagEngine(base=react, max_replans=agent.max_replans)
    return react


async def run_agent(
    snapshot: Snapshot,
    agent_name: str | AgentDecl,
    input: str | list[Message],
    *,
    services: Services | None = None,
    hooks: bool = True,
    depth: int = 0,
    parents: tuple[str, ...] = (),
    model: Model | None = None,
    stream: bool = False,
    run_id: str | None = None,
    guard: Any = None,
    overrides: RunOverrides | None = None,
    session: str | None = None,
) -> AsyncIterator[Event]:
    """Run one request through a declared agent and yield its events.

    `services` defaults to a private one closed when the run ends; long-lived surfaces
    (server, eval runner) pass theirs so MCP sessions and HTTP pools are shared. `session`
    names the conversation the run continues (session budgets, `fim.run.spend`).
    """
    agent = resolve_agent(snapshot, agent_name)
    own = services is None
    services = services or Services(root=snapshot.root, state_url=snapshot.project.state)
    ctx = RunContext(
        snapshot=snapshot,
        agent=agent,
        services=services,
        depth=depth,
        hooks_enabled=hooks,
        parents=parents,
        guard=guard,
        session=session,
    )
    if run_id:
        ctx.run_id = run_id
    try:
        request = (
            input
            if isinstance(input, str)
            else next((m.content or "" for m in reversed(input) if m.role == "user"), "")
        )
        engine = await make_engine(ctx, request, model=model, stream=stream, overrides=overrides)
        from fim.observe import observe_run

        events = observe_run(
            engine.run(input), agent=agent.name, run_id=ctx.run_id, snapshot=snapshot, depth=depth
        )
        from fim.run.spend import Ledger

        ledger = Ledger(services, agent.name, ctx.run_id, session)
        async for event in events:
            await ledger.see(event)
            yield event
    finally:
        if own:
            await services.aclose()


async def ask(
    snapshot: Snapshot, agent_name: str | AgentDecl, input: str | list[Message], **options: Any
) -> RunFinished:
    """Run an agent to completion and return its `run_finished` event."""
    final: RunFinished | None = None
    async for event in run_agent(snapshot, agent_name, input, **options):
        if isinstance(event, RunFinished):
            final = event
    if final is None:
        raise RunError(f"agent '{agent_name}' ended without a result")
    return final
