"""The scheduling loop of one workflow run: which node runs, which is skipped, when it ends.

A node runs once all of its incoming edges (its `needs`, and the `then`/`else` edge of a
condition that names it) are settled, and at least one of them is *live*: a finished
need, or the branch the condition took. A node whose incoming edges are all dead (skipped
needs, branches not taken) is skipped, which is how a condition prunes its whole subtree
while a node that the taken branch also reaches still runs. Nodes run as asyncio tasks,
at most `max_concurrency` at a time; their events flow through one bounded queue to the
caller (`fim.workflows.outbox`: a caller that stops reading holds the nodes up),
and every transition marks the run state for the store.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fim.build.snapshot import Snapshot
from fim.config.schema import WorkflowDecl
from fim.events import (
    ErrorEvent,
    Event,
    NodeFailed,
    NodeFinished,
    NodeSkipped,
    NodeStarted,
    Notice,
    WorkflowFinished,
)
from fim.locks import current_owner
from fim.observe import current_node
from fim.retries import Backoff, retry_async
from fim.run.services import Services
from fim.tasks import shielded
from fim.tools.registry import ToolRegistry
from fim.types import Tool
from fim.workflows import (
    adapters,  # noqa: F401  (registers the connector, database, mcp executors)
    templates,
)
from fim.workflows.graph import Edge, incoming
from fim.workflows.nodes import NodeContext, NodeError, Paused
from fim.workflows.outbox import Outbox
from fim.workflows.state import NodeState, Persister, RunState


@dataclass
class _Done:
    node: str
    output: Any = None
    error: str | None = None
    paused: Paused | None = None
    finished_at: float = field(default_factory=time.time)
    """Taken in the node's task, before its concurrency slot is released, so timestamps
    of events show true overlap."""


STOPPED = "cancelled"
"""The error of a run whose driving stopped mid-run (`Scheduler._stopped`: Ctrl-C, a client
leaving its stream, a cancel request): its finished nodes are recorded and the ones cut off
are `cancelled`, so `fim workflow resume` can run those again (`WorkflowEngine.resume`). A
run ended from outside its engine (a revoked key, an expired approval) records its reason
instead."""


class _AttemptFailed(Exception):
    """One failed attempt of a node; the message is the node's error."""


@dataclass
class Scheduler:
    """Drives one run (new or resumed) from its current state to its end or a pause."""

    snapshot: Snapshot
    services: Services
    name: str
    decl: WorkflowDecl
    state: RunState
    persister: Persister
    depth: int = 0
    parents: tuple[str, ...] = ()
    hooks: bool = True
    guard: Any = None
    session: str | None = None
    """The session of the agent run that started the workflow (`NodeContext.session`)."""
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    extra_tools: Mapping[str, Tool] = field(default_factory=dict)

    def fail_node(self, node_id: str, error: str) -> None:
        """Mark a node failed; with `on_error: continue` its output becomes the error."""
        decl = self.decl
        ns = self.state.nodes[node_id]
        ns.status, ns.error = "failed", self.snapshot.mask(error)
        if decl.nodes[node_id].on_error == "continue":
            ns.output = {"error": ns.error}

    def _live(self, edge: Edge) -> bool:
        decl, source = self.decl, self.state.nodes[edge.source]
        if source.status == "skipped":
            return False
        if source.status == "failed" and decl.nodes[edge.source].on_error != "continue":
            return False
        if edge.label == "needs":
            return True
        return isinstance(source.output, dict) and source.output.get("branch") == edge.label

    @staticmethod
    def _settled(ns: NodeState) -> bool:
        return ns.status in ("ok", "skipped", "failed")

    async def drive(self) -> AsyncGenerator[Event, None]:
        """Run every node that can run, yield their events, then the final event."""
        decl, state, persister = self.decl, self.state, self.persister
        into = incoming(decl)
        outgoing: dict[str, list[Edge]] = {n: [] for n in decl.nodes}
        for node_edges in into.values():
            for edge in node_edges:
                outgoing[edge.source].append(edge)
        remaining = {
            n: sum(1 for e in es if not self._settled(state.nodes[e.source]))
            for n, es in into.items()
        }
        ready = deque(
            n for n, s in state.nodes.items() if s.status == "pending" and not remaining[n]
        )
        scope_nodes = {
            n: templates.NodeScope(n, s.output, s.status)
            for n, s in state.nodes.items()
            if self._settled(s)
        }
        scope = {
            "inputs": state.inputs,
            "nodes": scope_nodes,
            "env": templates.allowed_env(self.snapshot.project.env_allowlist),
        }
        queue: Outbox[Event | _Done] = Outbox()
        semaphore = asyncio.Semaphore(decl.max_concurrency)
        tasks: dict[str, asyncio.Task[None]] = {}

        def settle(node_id: str) -> None:
            ns = state.nodes[node_id]
            scope_nodes[node_id] = templates.NodeScope(node_id, ns.output, ns.status)
            for edge in outgoing[node_id]:
                remaining[edge.target] -= 1
                if not remaining[edge.target] and state.nodes[edge.target].status == "pending":
                    ready.append(edge.target)

        ended = False  # the loop ran out of nodes: `finish` decides how the run ended
        try:
            persister.mark()
            owner = await self._owner()
            while True:
                while ready and state.error is None:
                    node_id = ready.popleft()
                    edges = into[node_id]
                    if edges and not any(self._live(e) for e in edges):
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
                        guard=self.guard,
                        session=self.session,
                        registry=self.registry,
                        extra_tools=self.extra_tools,
                        emit=queue.emit,
                    )
                    tasks[node_id] = asyncio.create_task(
                        self._run_node(node_id, ctx, queue, semaphore, owner)
                    )
                if not tasks:
                    break
                item = await queue.get()
                if not isinstance(item, _Done):
                    yield item
                    continue
                tasks.pop(item.node)
                event = self._complete(item)
                if event is not None:
                    yield event
                if state.nodes[item.node].status in ("ok", "failed"):
                    settle(item.node)
                if state.queued:  # a worker run: the result is durable before the next node
                    await persister.write()  # starts, so a re-delivered job never repeats it
                else:
                    persister.mark()
                if state.error is not None and tasks:
                    await self._cancel(tasks)
            ended = True
        finally:
            if not ended:  # cancelled, closed or failed mid-run: nothing drives it on
                await shielded(self._stopped(tasks))
        async for event in self.finish():
            yield event

    async def _owner(self) -> str:
        """The key that started this run (`fim.store.owners`, claimed before its first
        event), else the key of the work that started it (an agent's `run_workflow`), ""
        for none: its nodes' work is that key's (the agent runs it starts, its budget, its
        sandbox folder, its share of the worker pools)."""
        server = self.snapshot.project.server
        if not (server.api_keys or server.operator_keys):
            return current_owner.get()
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store
        from fim.store.owners import owner_of

        claimed = await owner_of(get_store(self.services), self.state.run_id)
        return claimed or current_owner.get()

    async def _stopped(self, tasks: dict[str, asyncio.Task[None]]) -> None:
        """End a run whose driving stopped before its end (its caller was cancelled, a
        client left its stream, its consumer closed it): its nodes cancelled, its record
        `cancelled`. Run `shielded`: under Starlette's cancellation every await of the
        cancelled task is cancelled again, and a record left `running` held its key's
        place among its paused runs for good (attack-30 #1)."""
        state = self.state
        if tasks:
            await self._cancel(tasks)
        state.status = "cancelled"
        state.error = state.error or STOPPED
        await self.persister.flush()

    async def _cancel(self, tasks: dict[str, asyncio.Task[None]]) -> None:
        state = self.state
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for node_id in tasks:
            state.nodes[node_id].status = "cancelled"
        tasks.clear()

    def _complete(self, done: _Done) -> Event | None:
        decl, state = self.decl, self.state
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
            ns.status, ns.output = "ok", self.snapshot.masker.value(done.output)
            return NodeFinished(
                run_id=state.run_id,
                node=done.node,
                output=ns.output,
                duration_ms=ns.duration_ms,
                ts=now,
            )
        self.fail_node(done.node, done.error)
        if decl.nodes[done.node].on_error == "fail":
            state.error = f"node '{done.node}' failed: {ns.error}"
        return NodeFailed(
            run_id=state.run_id, node=done.node, error=ns.error or "", attempt=ns.attempts, ts=now
        )

    async def _run_node(
        self,
        node_id: str,
        ctx: NodeContext,
        queue: Outbox[Event | _Done],
        semaphore: asyncio.Semaphore,
        owner: str,
    ) -> None:
        state, persister = self.state, self.persister
        node = self.decl.nodes[node_id]
        ns = state.nodes[node_id]
        async with semaphore:
            ns.status, ns.started_at, ns.attempts = "running", time.time(), 0
            await queue.put(NodeStarted(run_id=state.run_id, node=node_id, node_type=node.type))
            current_node.set(node_id)  # runs this node starts are traced under it
            current_owner.set(owner)  # and belong to the key that started the workflow
            persister.mark()
            attempts = 1 + node.retry.count

            async def attempt() -> Any:
                ns.attempts += 1
                try:
                    work = node.execute(ctx)
                    return await (asyncio.wait_for(work, node.timeout) if node.timeout else work)
                except asyncio.CancelledError:
                    raise
                except TimeoutError:
                    raise _AttemptFailed(f"timed out after {node.timeout:g}s") from None
                except NodeError as exc:
                    raise _AttemptFailed(str(exc)) from None
                except Exception as exc:  # an executor bug still ends as a node failure
                    raise _AttemptFailed(f"{type(exc).__name__}: {exc}") from None

            def notice(failed: int, delay: float, exc: BaseException | None) -> None:
                queue.emit(
                    Notice(
                        run_id=state.run_id,
                        message=f"node '{node_id}' failed (attempt {failed}/{attempts}): "
                        f"{self.snapshot.mask(str(exc))}; retrying in {delay:g}s",
                        data={"node": node_id, "attempt": failed, "retry_in": delay},
                    )
                )

            try:
                output = await retry_async(
                    attempt,
                    Backoff(attempts, node.retry.backoff),
                    retry_on=lambda exc: isinstance(exc, _AttemptFailed),
                    on_retry=notice,
                )
            except _AttemptFailed as exc:
                await queue.put(_Done(node_id, error=str(exc)))
                return
            done = (
                _Done(node_id, paused=output)
                if isinstance(output, Paused)
                else _Done(node_id, output=output)
            )
            await queue.put(done)  # holding its slot: a caller not reading holds it up

    async def finish(self) -> AsyncGenerator[Event, None]:
        """Decide the run's status, render the outputs, write the state, yield the end."""
        state = self.state
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
                state.status = self._render_outputs()
        now = time.time()
        if state.status != "paused":
            state.finished_at = now
        state.duration_ms = (now - state.started_at) * 1000
        await shielded(self.persister.flush())  # its end is written, even if cancelled now
        if state.status == "failed" and state.error and not state.error.startswith("node '"):
            yield ErrorEvent(run_id=state.run_id, message=state.error, kind="workflow_error")
        yield WorkflowFinished(
            run_id=state.run_id,
            workflow=self.name,
            status=state.status,
            outputs=state.outputs,
            duration_ms=state.duration_ms,
        )

    def _render_outputs(self) -> Literal["ok", "failed"]:
        """Render the declared outputs; the run's status: failed when they cannot be."""
        decl, state, nodes = self.decl, self.state, self.state.nodes
        scope = {
            "inputs": state.inputs,
            "nodes": {n: templates.NodeScope(n, s.output, s.status) for n, s in nodes.items()},
            "env": templates.allowed_env(self.snapshot.project.env_allowlist),
        }
        try:
            state.outputs = self.snapshot.masker.value(templates.render(dict(decl.outputs), scope))
            return "ok"
        except templates.TemplateError as exc:
            state.error = self.snapshot.mask(f"cannot render outputs: {exc}")
            return "failed"
