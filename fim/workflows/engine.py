"""The workflow engine: starts a declared DAG or resumes a paused one.

This module is the front door (inputs, guards against recursion, the persisted record,
resuming and recovering); `fim.workflows.scheduler` runs the nodes, `decision` checks the
human decision a paused run resumes with, `recovery` finds runs and decides whether one
may be taken over, `guards` builds the hooks a run gets when no agent hands its own in.
Every surface (CLI, HTTP, the `run_workflow` tool, eval) goes through `WorkflowEngine`, so
a run looks the same in the store whoever started it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing
from typing import Any

from fim.build.snapshot import Snapshot
from fim.config.schema import WorkflowDecl
from fim.errors import RunError
from fim.events import Event, NodeFailed, NodeFinished, Notice
from fim.masking import known
from fim.observe import observe_workflow
from fim.run.preflight import check_workflow
from fim.run.services import Services
from fim.tools.registry import ToolRegistry
from fim.types import Tool
from fim.workflows.decision import decide
from fim.workflows.guards import callers_guard, read_only_guard
from fim.workflows.inputs import validate_inputs
from fim.workflows.recovery import check_takeover, claim, load_run, orphaned_runs
from fim.workflows.scheduler import STOPPED, Scheduler
from fim.workflows.state import NodeState, Persister, RunState, current_owner

__all__ = ["WorkflowEngine", "load_run", "orphaned_runs", "run_workflow"]
"""`load_run` and `orphaned_runs` live in `fim.workflows.recovery`; imported from here too."""


class WorkflowEngine:
    """Runs (or resumes) one workflow of a snapshot and yields its events.

    `tools` adds tools that `tool` nodes may name besides the builtins (an embedding
    application's own functions, or test doubles). `hooks` is passed on to agent nodes;
    `guard` is the hook runner of the agent that started the workflow (`run_workflow`):
    every tool-like node and agent node runs under it. With hooks off (eval) the caller
    passes what still applies (its read-only guard); a workflow run on its own in a
    read-only project gets the read-only guard. `session` is that agent run's session:
    the runs the nodes start (agent and `llm` nodes) count toward its session budgets, as
    the run's delegates do. It is kept in memory only: a run an agent started has no human
    node, so it is never resumed elsewhere but to recover it.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        workflow_name: str,
        services: Services,
        *,
        depth: int = 0,
        parents: tuple[str, ...] = (),
        hooks: bool = True,
        tools: Iterable[Tool] = (),
        run_id: str | None = None,
        guard: Any = None,
        queued: bool = False,
        session: str | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.name = workflow_name
        self.services = services
        self.depth = depth
        self.parents = tuple(parents)
        self.hooks = hooks
        if guard is None and snapshot.project.read_only:
            guard = read_only_guard(snapshot, workflow_name, services)
        self.guard = guard
        self.session = session
        self.extra_tools = {t.name: t for t in tools}
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.state: RunState | None = None
        self.queued = queued
        """Run by a `fim worker` job (recorded in the run: see RunState.queued)."""
        self._registry = ToolRegistry()

    def _scheduler(self, decl: WorkflowDecl, state: RunState) -> Scheduler:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store

        return Scheduler(
            snapshot=self.snapshot,
            services=self.services,
            name=self.name,
            decl=decl,
            state=state,
            persister=Persister(get_store(self.services), state),
            depth=self.depth,
            parents=self.parents,
            hooks=self.hooks,
            guard=self.guard,
            session=self.session,
            registry=self._registry,
            extra_tools=self.extra_tools,
        )

    # ------------------------------------------------------------------ entry points

    def _guard(self) -> None:
        if self.name in self.parents:
            chain = " > ".join([*self.parents, self.name])
            raise RunError(
                f"workflow '{self.name}' cannot start itself (call chain: {chain})",
                hint="remove the agent node or run_workflow call that leads back to it",
            )
        limit = self.snapshot.project.max_depth
        if self.depth > limit:
            raise RunError(
                f"workflow '{self.name}' would run at depth {self.depth}, above max_depth {limit}",
                hint="nested agent/workflow calls are recursing; raise max_depth in fim.yaml "
                "if this is intended",
            )

    def _decl(self) -> WorkflowDecl:
        try:
            return self.snapshot.workflows[self.name]
        except KeyError:
            raise RunError(
                f"unknown workflow '{self.name}'",
                hint=f"workflows: {', '.join(sorted(self.snapshot.workflows)) or 'none'}",
            ) from None

    def _recorded_decl(self, state: RunState) -> WorkflowDecl:
        """The declaration a run started with. The store holds it masked, so when the
        project still declares the same workflow (equal once masked) its unmasked
        declaration is used: a resumed node gets the secrets it was written with."""
        current = self.snapshot.workflows.get(state.workflow)
        if current is not None:
            dumped = current.model_dump(mode="json", by_alias=True, exclude_none=True)
            if known().value(dumped) == state.decl:
                return current
        return WorkflowDecl.model_validate(state.decl)

    async def run(self, inputs: dict[str, Any] | None = None) -> AsyncGenerator[Event, None]:
        """Start a new run. Raises RunError before any event for bad inputs or guards."""
        decl = self._decl()
        self._guard()
        values = validate_inputs(self.name, decl, inputs)
        check_workflow(self.snapshot, decl, self.name)  # before any node: no side effect first
        if self.state is not None:  # the engine is reused: a new run gets a new id
            self.run_id = uuid.uuid4().hex[:12]
        self.state = RunState(
            run_id=self.run_id,
            workflow=self.name,
            decl=decl.model_dump(mode="json", by_alias=True, exclude_none=True),
            inputs=values,
            nodes={node_id: NodeState(type=node.type) for node_id, node in decl.nodes.items()},
            depth=self.depth,
            parents=list(self.parents),
            snapshot_version=self.snapshot.version,
            owner=current_owner(),
            queued=self.queued,
        )
        yield Notice(
            run_id=self.run_id,
            message=f"workflow '{self.name}' started",
            data={
                "workflow": self.name,
                "run_id": self.run_id,
                "inputs": self.snapshot.masker.value(values),
            },
        )

        drive = observe_workflow(
            self._scheduler(decl, self.state).drive(),
            workflow=self.name,
            run_id=self.run_id,
            snapshot=self.snapshot,
        )
        async with aclosing(drive) as events:
            async for event in events:
                yield event

    async def resume(
        self,
        run_id: str,
        approved: bool | None,
        data: dict[str, Any] | None = None,
        *,
        node: str | None = None,
        by: str = "cli",
        force: bool = False,
        cancelled: bool = False,
    ) -> AsyncGenerator[Event, None]:
        """Continue a run paused at a human node, in this process or after a restart, or
        recover one whose process died mid-node.

        `approved=None` takes the decision already recorded on the approval (e.g. through
        `fim approvals`); `node` picks one when several human nodes wait. `force` recovers
        a run recorded as running on another host, whose liveness cannot be checked.
        `cancelled` (the operator's `fim workflow resume`) also continues a run whose
        driving was stopped mid-run (Ctrl-C, its client leaving): like an orphaned run,
        its finished nodes are kept and the ones cut off run again. Other surfaces never
        pass it: a run an API caller cancelled stays cancelled for them.
        """
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store

        state = await load_run(self.services, run_id)
        if state.workflow != self.name:
            raise RunError(
                f"run '{run_id}' belongs to workflow '{state.workflow}', not '{self.name}'"
            )
        if state.status == "running":
            async with aclosing(self._recover(state, force)) as events:
                async for event in events:
                    yield event
            return
        if state.status == "cancelled" and cancelled:
            async with aclosing(self._restart(state)) as events:
                async for event in events:
                    yield event
            return
        waiting = [n for n, s in state.nodes.items() if s.status == "waiting"]
        if state.status != "paused" or not waiting:
            raise RunError(
                f"run '{run_id}' is {state.status}, not paused at a human node",
                hint="a run paused at a human node, one whose process died (`orphaned` in "
                "`fim workflow runs`) or one stopped mid-run (Ctrl-C) can be resumed; start "
                f"this one again with `fim workflow run {state.workflow}`",
            )
        if node is not None and node not in waiting:
            raise RunError(f"node '{node}' is not waiting", hint=f"waiting: {', '.join(waiting)}")
        node_id = node or waiting[0]
        decl = self._recorded_decl(state)
        if approved is not False:  # the nodes after an approval must not fail on a missing key
            check_workflow(self.snapshot, decl, self.name)
        ns = state.nodes[node_id]
        approval, given = await decide(
            get_store(self.services), decl, run_id, node_id, ns.approval_id, approved, data, by
        )
        self._adopt(state)
        yield Notice(
            run_id=run_id,
            message=f"workflow '{self.name}' resumed at '{node_id}' ({approval.status})"
            + self._version_note(state),
            data={
                "workflow": self.name,
                "run_id": run_id,
                "node": node_id,
                "decision": approval.status,
                "by": approval.resolved_by,
                "snapshot_version": self.snapshot.version,
            },
        )
        scheduler = self._scheduler(decl, state)
        now = time.time()
        ns.finished_at = now
        ns.duration_ms = (now - (ns.started_at or now)) * 1000
        if approval.status == "approved":
            ns.status, ns.output = "ok", self.snapshot.masker.value(given or {"approved": True})
            resumed: Event = NodeFinished(
                run_id=run_id, node=node_id, output=ns.output, duration_ms=ns.duration_ms
            )
        else:
            error = f"{approval.status} by {approval.resolved_by or 'unknown'}"
            scheduler.fail_node(node_id, error)
            resumed = NodeFailed(run_id=run_id, node=node_id, error=error, attempt=1)
        yield resumed
        if ns.status == "failed" and decl.nodes[node_id].on_error == "fail":
            state.error = f"node '{node_id}' failed: {ns.error}"
            async for event in scheduler.finish():
                yield event
            return
        # aclosing: a consumer that stops listening cancels the nodes now, not at GC time.
        async with aclosing(scheduler.drive()) as events:
            async for event in events:
                yield event

    def _adopt(self, state: RunState, cut_off: tuple[str, ...] = ("running",)) -> list[str]:
        """Take over a persisted run: nodes that were in flight when its process stopped
        run again (a node's effects are only recorded once it finishes). A run an agent
        started (`run_workflow`) held to that agent's hooks in memory: they are built again
        from the agents of its chain, so recovering it in another process does not run its
        remaining nodes past them. The snapshot they run on is recorded (`resumed_on`)
        when a reload changed it since the run's last leg: which version ran them is the
        question an audit of the run asks."""
        self.run_id = state.run_id
        self.depth = state.depth
        self.parents = tuple(state.parents)
        callers = callers_guard(self.snapshot, self.services, self.parents, self.hooks)
        if callers is not None:
            self.guard = callers
        self.state = state
        in_flight = [n for n, s in state.nodes.items() if s.status in cut_off]
        for node_id in in_flight:
            state.nodes[node_id].status = "pending"
        state.status = "running"
        state.owner = current_owner()
        last = state.resumed_on[-1] if state.resumed_on else state.snapshot_version
        if self.snapshot.version != last:
            state.resumed_on.append(self.snapshot.version)
        return in_flight

    def _version_note(self, state: RunState) -> str:
        """What a resumed run's notice says of its snapshot ("" when it never changed)."""
        if not state.resumed_on or state.resumed_on[-1] != self.snapshot.version:
            return ""
        return f" on snapshot {self.snapshot.version} (started on {state.snapshot_version})"

    async def _recover(self, state: RunState, force: bool) -> AsyncGenerator[Event, None]:
        """Continue a run recorded as running whose process is gone (once
        `fim.workflows.recovery.check_takeover` lets this process take it over)."""
        check_takeover(state, self.queued, force)
        decl = self._recorded_decl(state)
        again = self._adopt(state)
        await claim(self.services, state, "running")
        async with aclosing(self._go_on(decl, state, "recovered", again)) as events:
            async for event in events:
                yield event

    async def _go_on(
        self, decl: Any, state: RunState, how: str, again: list[str]
    ) -> AsyncGenerator[Event, None]:
        """Say how a taken-over run goes on (`how`, the nodes run `again`), then drive it."""
        yield Notice(
            run_id=state.run_id,
            message=f"workflow '{self.name}' {how}"
            + (f": running {', '.join(again)} again" if again else "")
            + self._version_note(state),
            data={
                "workflow": self.name,
                "run_id": state.run_id,
                "rerun": again,
                "snapshot_version": self.snapshot.version,
            },
        )
        async with aclosing(self._scheduler(decl, state).drive()) as events:
            async for event in events:
                yield event

    async def _restart(self, state: RunState) -> AsyncGenerator[Event, None]:
        """Continue a run whose driving was stopped mid-run (`scheduler.STOPPED`): the
        nodes cut off (`cancelled`) run again, the finished ones keep their outputs, as
        when an orphaned run is recovered. A run ended from outside (a revoked key, an
        expired approval, a `fim worker` job cancelled) is refused with its reason."""
        workflow = state.workflow
        if state.queued:
            raise RunError(
                f"run '{state.run_id}' was cancelled as a `fim worker` job",
                hint=f"start it again with `fim workflow run {workflow}`",
            )
        if state.error != STOPPED or not state.decl:
            raise RunError(
                f"run '{state.run_id}' was cancelled: {state.error or 'no reason recorded'}",
                hint="only a run stopped while it ran (Ctrl-C, its client leaving) can be "
                f"resumed; start this one again with `fim workflow run {workflow}`",
            )
        decl = self._recorded_decl(state)
        again = self._adopt(state, cut_off=("running", "cancelled"))
        state.error, state.finished_at = None, None
        await claim(self.services, state, "cancelled")
        how = "resumed after it was cancelled"
        async with aclosing(self._go_on(decl, state, how, again)) as events:
            async for event in events:
                yield event


async def run_workflow(
    snapshot: Snapshot,
    name: str,
    inputs: dict[str, Any] | None,
    services: Services,
    **options: Any,
) -> RunState:
    """Run a workflow to its end (or pause) and return its final state."""
    engine = WorkflowEngine(snapshot, name, services, **options)
    async for _ in engine.run(inputs):
        pass
    assert engine.state is not None
    return engine.state
