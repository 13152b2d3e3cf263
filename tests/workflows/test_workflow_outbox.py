"""A workflow run's events wait in a bounded outbox: a caller that stops reading holds the
run's nodes up instead of the server piling up their outputs (attack-54 F2)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import Project, WorkflowDecl
from fim.run.services import Services
from fim.tools.base import FunctionTool
from fim.workflows.engine import WorkflowEngine, load_run
from fim.workflows.outbox import OUTBOX_LIMIT, Outbox

NODES = 4 * OUTBOX_LIMIT
"""More independent nodes than the outbox holds events, several times over."""


@pytest.fixture
async def services(tmp_path: Path) -> Any:
    services = Services(
        providers=CAPABILITIES, root=tmp_path, state_url=f"sqlite:///{tmp_path}/state.db"
    )
    yield services
    await services.aclose()


def counting_tool(calls: list[int]) -> FunctionTool:
    """Returns a 1 KB answer and records that it was called."""

    async def run(value: int = 0) -> str:
        calls.append(value)
        return "x" * 1024

    schema = {"type": "object", "properties": {"value": {"type": "integer"}}}
    return FunctionTool("count", "Counts its calls", schema, run, category="testing")


def wide(tmp_path: Path) -> Snapshot:
    nodes = {f"n{i}": {"type": "tool", "tool": "count", "args": {"value": i}} for i in range(NODES)}
    body = {"name": "wide", "max_concurrency": NODES, "nodes": nodes}
    return Snapshot(
        root=tmp_path,
        project=Project(state=f"sqlite:///{tmp_path}/state.db"),
        workflows={"wide": WorkflowDecl.model_validate(body)},
    )


async def settle(calls: list[int]) -> None:
    """Let every task that can make progress make it: the event loop turns until the
    count of calls has not moved for many turns (the nodes do no I/O)."""
    still, seen = 0, -1
    while still < 200:
        await asyncio.sleep(0)
        still, seen = (still + 1, seen) if len(calls) == seen else (0, len(calls))


async def test_a_caller_that_stops_reading_stops_the_nodes_not_the_memory(tmp_path, services):
    calls: list[int] = []
    engine = WorkflowEngine(wide(tmp_path), "wide", services, tools=[counting_tool(calls)])
    stream = engine.run({})
    async for event in stream:
        if event.type == "node_started":
            break  # the caller reads no further, and does not leave either
    await settle(calls)

    # each running node queues at most its start, its call and its result before it waits
    # for room to queue its end: far fewer than all of them ran
    assert 0 < len(calls) < NODES
    assert len(calls) <= OUTBOX_LIMIT, len(calls)
    await stream.aclose()  # the caller leaves: the nodes waiting for room are cancelled

    state = await load_run(services, engine.run_id)
    assert state.status == "cancelled"
    statuses = {ns.status for ns in state.nodes.values()}
    assert statuses <= {"cancelled", "pending"} and "cancelled" in statuses


async def test_a_caller_that_reads_everything_gets_every_node_through_the_bound(tmp_path, services):
    calls: list[int] = []
    engine = WorkflowEngine(wide(tmp_path), "wide", services, tools=[counting_tool(calls)])
    events = [e async for e in engine.run({})]

    assert events[-1].type == "workflow_finished" and events[-1].status == "ok"
    assert sorted(calls) == list(range(NODES))
    assert sum(e.type == "node_finished" for e in events) == NODES


async def test_put_waits_for_room_and_emit_does_not() -> None:
    box: Outbox[int] = Outbox(limit=2)
    await box.put(1)
    await box.put(2)
    waiting = asyncio.create_task(box.put(3))
    await asyncio.sleep(0)
    assert not waiting.done() and len(box) == 2

    box.emit(9)  # a node's event between two awaits goes in at once
    assert len(box) == 3
    assert await box.get() == 1
    await asyncio.sleep(0)
    assert not waiting.done()  # 2 and 9 still wait: room only below the limit
    assert await box.get() == 2
    await waiting
    assert [await box.get(), await box.get()] == [9, 3]


async def test_a_put_waiting_for_room_can_be_cancelled() -> None:
    box: Outbox[int] = Outbox(limit=1)
    await box.put(1)
    waiting = asyncio.create_task(box.put(2))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await box.get() == 1 and len(box) == 0
