"""Every event of every DAG step reaches the run (attack-66 follow-up): `_execute` stopped
reading its queue once every step's task had finished, so the events a step queued just
before it ended (its tool call's result, its answer, its `step_finished`) were dropped
when a sibling's end was read first: the record of a run did not show a write that ran.
And parallel steps no longer share the transcript hooks read, nor the call views keyed by
call ids that sibling steps may repeat."""

from __future__ import annotations

import asyncio
from typing import Any

from fim.engines.dag import DagEngine
from fim.events import StepFinished, ToolCallEvent, ToolResultEvent
from tests.engines.test_engines_dag import THREE_STEPS, Roles, collect, dag, gathered_lookup


async def read_slowly(engine: DagEngine) -> list[Any]:
    """The run's events, read by a consumer that awaits after each (a server storing or
    streaming them): the steps run ahead of it, so both can end before it reads either end."""
    events = []
    async for event in engine.run("What is our profit?"):
        events.append(event)
        for _ in range(20):
            await asyncio.sleep(0)
    return events


def test_two_parallel_steps_ending_together_keep_all_their_events() -> None:
    for _ in range(3):  # the steps meet in their tool calls, so they end together
        engine, _model = dag(Roles([THREE_STEPS]), calls=8, lookup=gathered_lookup(2))
        events = asyncio.run(read_slowly(engine))
        assert [e.name for e in events if isinstance(e, ToolCallEvent)] == ["lookup", "lookup"]
        results = sorted(e.content for e in events if isinstance(e, ToolResultEvent))
        assert results == ["100", "60"]
        assert sorted(e.step for e in events if isinstance(e, StepFinished)) == ["s1", "s2", "s3"]


def test_each_step_runs_on_its_own_transcript_and_call_views() -> None:
    engine, _model = dag(Roles([THREE_STEPS]), calls=8, lookup=gathered_lookup(2))
    seen: list[tuple[int, int]] = []
    original = type(engine.base).run

    async def spying(self, input):  # type: ignore[no-untyped-def]
        seen.append((id(self.transcript), id(self.views)))
        async for event in original(self, input):
            yield event

    type(engine.base).run = spying  # type: ignore[method-assign]
    try:
        asyncio.run(collect(engine))
    finally:
        type(engine.base).run = original  # type: ignore[method-assign]
    assert len(seen) == 3 and len(set(seen)) == 3
