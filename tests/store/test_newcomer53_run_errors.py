"""Newcomer 53 #7 in the state store: `list_runs(has_errors=...)` finds the runs whose
record counts a tool error or a hook block (`fim.run_summary`), on SQLite and PostgreSQL
alike; a record written before the counts existed counts as neither."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fim.run_summary import run_summary
from fim.store import Store

TOOL_ERROR = [
    {"type": "run_started", "input": "order 2?\nplease"},
    {"type": "tool_call", "call_id": "c1", "name": "lookup_order"},
    {"type": "tool_result", "call_id": "c1", "name": "lookup_order", "is_error": True},
]
BLOCKED = [
    {"type": "run_started", "input": "1+1"},
    {"type": "hook", "call_id": "c1", "hook": "guards:No", "decision": "block"},
    {"type": "tool_result", "call_id": "c1", "name": "calculator", "is_error": True},
]


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    s = Store(store_url)
    yield s
    s.close()


def test_a_runs_summary_counts_errors_blocks_and_keeps_its_inputs_first_line() -> None:
    assert run_summary(TOOL_ERROR) == {"tool_errors": 1, "hook_blocks": 0, "input": "order 2?"}
    assert run_summary(BLOCKED) == {"tool_errors": 0, "hook_blocks": 1, "input": "1+1"}
    assert run_summary([]) == {"tool_errors": 0, "hook_blocks": 0}  # refused: no input


async def test_runs_are_listed_by_whether_they_had_errors(store: Store) -> None:
    await store.put_run("erred", "agent", "a", "ok", run_summary(TOOL_ERROR))
    await store.put_run("blocked", "agent", "a", "ok", run_summary(BLOCKED))
    await store.put_run("clean", "agent", "a", "ok", run_summary([{"type": "run_started"}]))
    await store.put_run("old", "agent", "a", "ok", {"output": "from before the counts"})
    found = {r.id for r in await store.list_runs(has_errors=True)}
    assert found == {"erred", "blocked"}
    assert {r.id for r in await store.list_runs(has_errors=False)} == {"clean", "old"}
    assert len(await store.list_runs()) == 4
