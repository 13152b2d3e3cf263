"""The workflow engine: runs a declared DAG, persists every step, pauses for humans.

A node runs once all of its incoming edges (its `needs`, and the `then`/`else` edge of a
condition that names it) are settled, and at least one of them is *live*: a finished
need, or the branch the condition took. A node whose incoming edges are all dead (skipped
needs, branches not taken) is skipped, which is how a condition prunes its whole subtree
while a node that the taken branch also reaches still runs. Nodes run as asyncio tasks,
at most `max_concurrency` at a time; events flow through one queue to the caller.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from fim.config.schema import WorkflowDecl
from fim.errors import RunError
from fim.runtime import Services
from fim.snapshot import Snapshot
from fim.tools.registry import ToolRegistry
from fim.types import (
    ErrorEvent,
    Event,
    NodeFailed,
    NodeFinished,
    NodeSkipped,
    NodeStarted,
    Notice,
    Tool,
    WorkflowFinished,
)
from fim.workflows import templates
from fim.workflows.graph import Edge, incoming
from fim.workflows.inputs import validate_inputs
from fim.workflows.nodes import EXECUTORS, NodeContext, NodeError, Paused
from fim.workflows.state import KIND, NodeState, Persister, RunState, record_data


@dataclass
class _Done:
    node: str
    output: Any = None
    error: str | None = None
    paused: Paused | None = None
    finished_at: float = field(default_factory=time.time)
    """Taken in the node's task, before its concurrency slot is released, so timestamps
    of events show true overlap."""


async def load_run(services: Services, run_id: str) -> RunState:
    """The persisted state of a workflow run, or a RunError naming what exists."""
    from fim.store import get_store

    record = await get_store(services).get_run(run_id)
    if record is None or record.kind != KIND:
        raise RunError(
            f"no workflow run '{run_id}'", hint="`fim workflow runs` lists the recent runs"
        )
    return RunState.from_dict(record_data(record))


def _mask(snapshot: Snapshot, value: Any) -> Any:
    if not snapshot.secrets:
        return value
    if isinstance(value, str):
        return snapshot.mask(value)
    if isinstance(value, dict):
        return {k: _mask(snapshot, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(snapshot, v) for v in value]
    return value


class WorkflowEngine:
    """Runs (or resumes) one workflow of a snapshot and yields its events.

    `tools` adds tools that `tool` nodes may name besides the builtins (an embedding
    application's own functions, or test doubles). `hooks` is passed on to agent nodes.
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
    ) -> None:
        self.snapshot = snapshot
        self.name = workflow_name
        self.services = services
        self.depth = depth
        self.parents = tuple(parents)
        self.hooks = hooks
        self.extra_tools = {t.name: t for t in tools}
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.state: RunState | None = None
        self._registry = ToolRegistry()

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

    async def run(self, inputs: dict[str, Any] | None = None) -> AsyncIterator[Event]:
        """Start a new run. Raises RunError before any event for bad inputs or guards."""
        decl = self._decl()
        self._guard()
        values = validate_inputs(self.name, decl, inputs)
        self.state = RunState(
            run_id=self.run_id,
            workflow=self.name,
            decl=decl.model_dump(mode="json", by_alias=True, exclude_none=True),
            inputs=values,
            nodes={node_id: NodeState(type=node.type) for node_id, node in decl.nodes.items()},
            depth=self.depth,
            parents=list(self.parents),
            snapshot_version=self.snapshot.version,
        )
        yield Notice(
            run_id=self.run_id,
            message=f"workflow '{self.name}' started",
            data={
                "workflow": self.name,
                "run_id": self.run_id,
                "inputs": _mask(self.snapshot, values),
            },
        )
        async with aclosing(self._drive(decl, self.state)) as events:
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
    ) -> AsyncIterator[Event]:
        """Continue a run paused at a human node, in this process or after a restart.

        `approved=None` takes the decision already recorded on the approval (e.g. through
        `fim approvals`); `node` picks one when several human nodes wait.
        """
        from fim.store import get_store

        state = await load_run(self.services, run_id)
        if state.workflow != self.name:
            raise RunError(
                f"run '{run_id}' belongs to workflow '{state.workflow}', not '{self.name}'"
            )
        waiting = [n for n, s in state.nodes.items() if s.status == "waiting"]
        if state.status != "paused" or not waiting:
            raise RunError(
                f"run '{run_id}' is {state.status}, not paused at a human node",
                hint="only paused runs can be resumed",
            )
        if node is not None and node not in waiting:
            raise RunError(f"node '{node}' is not waiting", hint=f"waiting: {', '.join(waiting)}")
        node_id = node or waiting[0]
        decl = WorkflowDecl.model_validate(state.decl)
        ns = state.nodes[node_id]
        store = get_store(self.services)
        approval = await store.get_approval(ns.approval_id or "")
        if approval is None:
            raise RunError(f"the approval of node '{node_id}' is missing from the state store")
        given = dict(data or {})
        if approval.status == "pending":
            if approved is None:
                raise RunError(
                    f"node '{node_id}' is still waiting for a decision",
                    hint="pass --approve or --deny (and --input k=v for data)",
                )
            schema = getattr(decl.nodes[node_id], "input_schema", None)
            if approved and schema:
                from fim.workflows.nodes import _schema_problems

                problems = _schema_problems(given, schema)
                if problems:
                    raise RunError(
                        f"invalid input for node '{node_id}': {'; '.join(problems)}",
                        hint=f"the node accepts: {schema}",
                    )
            approval = await store.resolve_approval(approval.id, approved, by=by, data=given)
        elif approved is not None and (approval.status == "approved") != approved:
            raise RunError(
                f"node '{node_id}' was already {approval.status} by {approval.resolved_by}",
                hint="resume without --approve/--deny to continue with that decision",
            )
        if approval.status == "approved" and not await store.consume_approval(approval.id):
            raise RunError(
                f"run '{run_id}' was already resumed at '{node_id}' by another process",
                hint=f"`fim workflow show {run_id}` shows where it is now",
            )
        base = {"workflow", "run_id", "node"}
        if not given:
            given = {k: v for k, v in (approval.data or {}).items() if k not in base}
        self.run_id = run_id
        self.depth = state.depth
        self.parents = tuple(state.parents)
        self.state = state
        for other in state.nodes.values():
            if other.status == "running":  # the process died mid-node: run it again
                other.status = "pending"
        state.status = "running"
        yield Notice(
            run_id=run_id,
            message=f"workflow '{self.name}' resumed at '{node_id}' ({approval.status})",
            data={
                "workflow": self.name,
                "run_id": run_id,
                "node": node_id,
                "decision": approval.status,
                "by": approval.resolved_by,
            },
        )
        now = time.time()
        ns.finished_at = now
        ns.duration_ms = (now - (ns.started_at or now)) * 1000
        if approval.status == "approved":
            ns.status, ns.output = "ok", _mask(self.snapshot, given or {"approved": True})
            resumed: Event = NodeFinished(
                run_id=run_id, node=node_id, output=ns.output, duration_ms=ns.duration_ms
            )
        else:
            error = f"{approval.status} by {approval.resolved_by or 'unknown'}"
            self._fail_node(decl, node_id, error)
            resumed = NodeFailed(run_id=run_id, node=node_id, error=error, attempt=1)
        yield resumed
        if ns.status == "failed" and decl.nodes[node_id].on_error == "fail":
            state.error = f"node '{node_id}' failed: {ns.error}"
            async for event in self._finish(decl, state, Persister(store, state)):
                yield event
            return
        # aclosing: a consumer that stops listening cancels the nodes now, not at GC time.
        async with aclosing(self._drive(decl, state)) as events:
            async for event in events:
                yield event

    # ------------------------------------------------------------------ scheduling

    def _fail_node(self, decl: WorkflowDecl, node_id: str, error: str) -> None:
        assert self.state is not None
        ns = self.state.nodes[node_id]
        ns.status, ns.error = "failed", self.snapshot.mask(error)
        if decl.nodes[node_id].on_error == "continue":
            ns.output = {"error": ns.error}

    def _live(self, decl: WorkflowDecl, state: RunState, edge: Edge) -> bool:
        source = state.nodes[edge.source]
        if source.status == "skipped":
            return False
        if source.status == "failed" and decl.nodes[edge.source].on_error != "continue":
            return False
        if edge.label == "needs":
            return True
        return isinstance(source.output, dict) and source.output.get("branch") == edge.label

    @staticmethod
    def _settled(decl: WorkflowDecl, ns: NodeState) -> bool:
        return ns.status in ("ok", "skipped") or ns.status == "failed"

    async def _drive(self, decl: WorkflowDecl, state: RunState) -> AsyncIterator[Event]:
        from fim.store import get_store

        into = incoming(decl)
        outgoing: dict[str, list[Edge]] = {n: [] for n in decl.nodes}
        for node_edges in into.values():
            for edge in node_edges:
                outgoing[edge.source].append(edge)
        remaining = {
            n: sum(1 for e in es if not self._settled(decl, state.nodes[e.source]))
            for n, es in into.items()
        }
        ready = deque(
            n for n, s in state.nodes.items() if s.status == "pending" and not remaining[n]
        )
        scope_nodes = {
            n: {"output": s.output, "status": s.status}
            for n, s in state.nodes.items()
            if self._settled(decl, s)
        }
        scope = {
            "inputs": state.inputs,
            "nodes": scope_nodes,
            "env": templates.allowed_env(self.snapshot.project.env_allowlist),
        }
        persister = Persister(get_store(self.services), state)
        queue: asyncio.Queue[Event | _Done] = asyncio.Queue()
        semaphore = asyncio.Semaphore(decl.max_concurrency)
        tasks: dict[str, asyncio.Task[None]] = {}

        def settle(node_id: str) -> None:
            ns = state.nodes[node_id]
            scope_nodes[node_id] = {"output": ns.output, "status": ns.status}
            for edge in outgoing[node_id]:
                remaining[edge.target] -= 1
                if not remaining[edge.target] and state.nodes[edge.target].status == "pending":
                    ready.append(edge.target)

        persister.mark()
        try:
            while True:
                while ready and state.error is None:
                    node_id = ready.popleft()
                    edges = into[node_id]
                    if edges and not any(self._live(decl, state, e) for e in edges):
                        ns = state.nodes[node_id]
                        ns.status = "skipped"
                        branch = [e for e in edges if e.label != "needs"]
                        ns.reason = (
                            f"branch not taken at '{branch[0].source}'"
                            if branch and len(branch) == len(edges)
                            else "nothing that leads here ran"
                        )
                        yield NodeSkipped(run_id=state.run_id, node=node_id, reason=ns.reason)
                        settle(node_id)
                        persister.mark()
                        continue
                    ctx = NodeContext(
                        snapshot=self.snapshot,
                        services=self.services,
                        workflow=self.name,
                        run_id=state.run_id,
                        node_id=node_id,
                        scope=scope,
                        depth=self.depth,
                        parents=self.parents,
                        hooks=self.hooks,
                        registry=self._registry,
                        extra_tools=self.extra_tools,
                        emit=queue.put_nowait,
                    )
                    tasks[node_id] = asyncio.create_task(
                        self._run_node(decl, state, node_id, ctx, queue, semaphore, persister)
                    )
                if not tasks:
                    break
                item = await queue.get()
                if not isinstance(item, _Done):
                    yield item
                    continue
                tasks.pop(item.node)
                event = self._complete(decl, state, item)
                if event is not None:
                    yield event
                if state.nodes[item.node].status in ("ok", "failed"):
                    settle(item.node)
                persister.mark()
                if state.error is not None and tasks:
                    await self._cancel(state, tasks)
        finally:
            if tasks:
                await self._cancel(state, tasks)
                state.status = "cancelled"
                state.error = state.error or "cancelled"
                await persister.flush()
        async for event in self._finish(decl, state, persister):
            yield event

    async def _cancel(self, state: RunState, tasks: dict[str, asyncio.Task[None]]) -> None:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for node_id in tasks:
            state.nodes[node_id].status = "cancelled"
        tasks.clear()

    def _complete(self, decl: WorkflowDecl, state: RunState, done: _Done) -> Event | None:
        ns = state.nodes[done.node]
        now = done.finished_at
        if done.paused is not None:
            ns.status, ns.approval_id, ns.prompt = (
                "waiting",
                done.paused.approval_id,
                done.paused.prompt,
            )
            return Notice(
                run_id=state.run_id,
                message=f"node '{done.node}' waits for a human: {done.paused.prompt}",
                data={
                    "node": done.node,
                    "approval_id": done.paused.approval_id,
                    "prompt": done.paused.prompt,
                    "run_id": state.run_id,
                },
            )
        ns.finished_at = now
        ns.duration_ms = (now - (ns.started_at or now)) * 1000
        if done.error is None:
            ns.status, ns.output = "ok", _mask(self.snapshot, done.output)
            return NodeFinished(
                run_id=state.run_id,
                node=done.node,
                output=ns.output,
                duration_ms=ns.duration_ms,
                ts=now,
            )
        self._fail_node(decl, done.node, done.error)
        if decl.nodes[done.node].on_error == "fail":
            state.error = f"node '{done.node}' failed: {ns.error}"
        return NodeFailed(
            run_id=state.run_id, node=done.node, error=ns.error or "", attempt=ns.attempts, ts=now
        )

    async def _run_node(
        self,
        decl: WorkflowDecl,
        state: RunState,
        node_id: str,
        ctx: NodeContext,
        queue: asyncio.Queue[Event | _Done],
        semaphore: asyncio.Semaphore,
        persister: Persister,
    ) -> None:
        node = decl.nodes[node_id]
        ns = state.nodes[node_id]
        async with semaphore:
            ns.status, ns.started_at, ns.attempts = "running", time.time(), 0
            queue.put_nowait(NodeStarted(run_id=state.run_id, node=node_id, node_type=node.type))
            persister.mark()
            attempts = 1 + node.retry.count
            error = ""
            for attempt in range(1, attempts + 1):
                ns.attempts = attempt
                try:
                    work = EXECUTORS[node.type](node, ctx)
                    output = await (asyncio.wait_for(work, node.timeout) if node.timeout else work)
                except asyncio.CancelledError:
                    raise
                except TimeoutError:
                    error = f"timed out after {node.timeout:g}s"
                except NodeError as exc:
                    error = str(exc)
                except Exception as exc:  # an executor bug still ends as a node failure
                    error = f"{type(exc).__name__}: {exc}"
                else:
                    done = (
                        _Done(node_id, paused=output)
                        if isinstance(output, Paused)
                        else _Done(node_id, output=output)
                    )
                    queue.put_nowait(done)
                    return
                if attempt < attempts:
                    delay = node.retry.backoff * 2 ** (attempt - 1)
                    queue.put_nowait(
                        Notice(
                            run_id=state.run_id,
                            message=f"node '{node_id}' failed (attempt {attempt}/{attempts}): "
                            f"{self.snapshot.mask(error)}; retrying in {delay:g}s",
                            data={"node": node_id, "attempt": attempt, "retry_in": delay},
                        )
                    )
                    await asyncio.sleep(delay)
            queue.put_nowait(_Done(node_id, error=error))

    async def _finish(
        self, decl: WorkflowDecl, state: RunState, persister: Persister
    ) -> AsyncIterator[Event]:
        if state.status == "cancelled":
            return
        waiting = [n for n, s in state.nodes.items() if s.status == "waiting"]
        if state.error is not None:
            state.status = "failed"
        elif waiting:
            state.status = "paused"
        else:
            stuck = [n for n, s in state.nodes.items() if s.status == "pending"]
            if stuck:
                state.error = f"nodes never became ready: {', '.join(stuck)} (is there a cycle?)"
                state.status = "failed"
            else:
                self._render_outputs(decl, state)
        now = time.time()
        if state.status != "paused":
            state.finished_at = now
        state.duration_ms = (now - state.started_at) * 1000
        await persister.flush()
        if state.status == "failed" and state.error and not state.error.startswith("node '"):
            yield ErrorEvent(run_id=state.run_id, message=state.error, kind="workflow_error")
        yield WorkflowFinished(
            run_id=state.run_id,
            workflow=self.name,
            status=state.status,
            outputs=state.outputs,
            duration_ms=state.duration_ms,
        )

    def _render_outputs(self, decl: WorkflowDecl, state: RunState) -> None:
        scope = {
            "inputs": state.inputs,
            "nodes": {n: {"output": s.output, "status": s.status} for n, s in state.nodes.items()},
            "env": templates.allowed_env(self.snapshot.project.env_allowlist),
        }
        try:
            state.outputs = _mask(self.snapshot, templates.render(dict(decl.outputs), scope))
            state.status = "ok"
        except templates.TemplateError as exc:
            state.error = self.snapshot.mask(f"cannot render outputs: {exc}")
            state.status = "failed"


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
