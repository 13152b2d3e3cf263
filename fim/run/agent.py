"""Running a declared agent: plan the run (`fim.run.plan`), build its engine, drive it.

This is the one entry point every surface uses (CLI, HTTP, workflow agent nodes,
delegation, eval), so hooks, tool modes and depth guards behave the same everywhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl
from fim.errors import FimError, RunError
from fim.events import Event, RunFinished
from fim.locks import current_owner
from fim.observe import count_refused, watch_run
from fim.run.auto import resolve_agent
from fim.run.ledger import Ledger
from fim.run.plan import build_engine, build_plan
from fim.run.services import RunContext, Services
from fim.run.tree import spending
from fim.types import Message, Model

if TYPE_CHECKING:
    from fim.run.overrides import RunOverrides


async def run_agent(
    snapshot: Snapshot,
    agent_name: str | AgentDecl,
    input: str | list[Message],
    *,
    services: Services,
    hooks: bool = True,
    depth: int = 0,
    parents: tuple[str, ...] = (),
    model: Model | None = None,
    stream: bool = False,
    run_id: str | None = None,
    guard: Any = None,
    overrides: RunOverrides | None = None,
    session: str | None = None,
    owner: str = "",
) -> AsyncIterator[Event]:
    """Run one request through a declared agent and yield its events.

    `services` is the process's (built by the surface with the capability areas,
    `fim.capabilities.CAPABILITIES`), so MCP sessions and HTTP pools are shared between runs
    and closed by whoever made them. `session` names the conversation the run continues
    (session budgets, `fim.run.spend`). `owner`, the key hash of the server's caller
    (default: the owner of the run that starts this one, `current_owner`), is
    recorded before the run starts, and so for every run it delegates to: only that key
    reads them back and decides what they wait on.
    """
    agent = resolve_agent(snapshot, agent_name)
    owner = owner or current_owner.get()
    ctx = RunContext(
        snapshot=snapshot,
        agent=agent,
        services=services,
        depth=depth,
        hooks_enabled=hooks,
        parents=parents,
        guard=guard,
        session=session,
        owner=owner,
    )
    if run_id:
        ctx.run_id = run_id
    request = (
        input
        if isinstance(input, str)
        else next((m.content or "" for m in reversed(input) if m.role == "user"), "")
    )
    try:
        plan = await build_plan(ctx, request, model=model, stream=stream, overrides=overrides)
    except FimError:  # refused before it started: still a failed run in the metrics
        count_refused(agent.name)
        raise
    engine = build_engine(plan)
    if owner:  # before its first event: no one else ever sees the run
        # deferred: the state store loads on a keyed server's runs only (a few ms)
        from fim.store import get_store
        from fim.store.owners import claim

        await claim(get_store(services), ctx.run_id, owner)
    watch = watch_run(
        agent=agent.name,
        run_id=ctx.run_id,
        snapshot=snapshot,
        depth=depth,
        session=session,
        owner=owner,
        capture=plan.capture,
    )
    on = watch.on if watch is not None else None
    if watch is not None:  # its `run_started` names the run's trace
        engine.trace_id = watch.trace_id
    spend = ctx.spend
    ledger = Ledger(services, agent.name, ctx.run_id, session, spend)
    with watch or nullcontext(), _owned_by(owner), spending(spend):
        try:
            async with aclosing(engine.run(input)) as events:  # type: ignore[type-var]
                async for event in events:
                    if on is not None:  # spans and metrics, when on
                        on(event)
                    # the run's end: its usage is written before it is passed on
                    if ledger.count(event):
                        await ledger.finish(event, spend.unreported)
                    yield event
        except BaseException as exc:  # closed early: what its calls spent still counts
            status = "error" if isinstance(exc, Exception) else "cancelled"
            await ledger.closed(status, spend.unreported)
            raise
        if not ledger.written:  # an engine that ended without `run_finished`
            await ledger.closed("error", spend.unreported)


@contextmanager
def _owned_by(owner: str) -> Iterator[None]:
    """`current_owner` set to `owner` while the run goes (the runs it starts are owner's)."""
    if not owner:
        yield
        return
    token = current_owner.set(owner)
    try:
        yield
    finally:
        with suppress(ValueError):  # closed from another context
            current_owner.reset(token)


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
