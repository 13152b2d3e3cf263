"""Budgets hold for what a workflow spends, whoever started it.

A workflow's `llm` node is a run of its own, as an agent node is: one more run of the tree
of the request that started it (`max_runs`), its spend counts toward the per-run limits of
every run above it, the project's, the key's and the session's budgets hold for it, and it
is written to the usage table as agent `workflow:<name>`. The agent nodes and `llm` nodes
of a workflow that an agent run started count toward that run's session, as the run's
delegates do.

Models are scripted (usage: 4 characters a token); the budgets leave a wide margin
around the estimates, so no test depends on a tokenizer's exact count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.events import Event, ToolResultEvent
from fim.run.services import Services
from fim.server.app import create_app
from fim.store import Store
from fim.store.usage import session_spent, summary
from fim.testing.runs import run_events
from fim.testing.server import ServerThread
from fim.workflows.engine import WorkflowEngine

SYSTEM = "Summarise the quarterly figures of every region carefully. " * 150
"""The system prompt of `summ`'s `llm` node: a call of it spends about 2,300 tokens (its
estimate before the call is about 1,700)."""

SUMM = {
    "description": "Summarise a text",
    "inputs": {"text": {"type": "string"}},
    "nodes": {
        "s": {
            "type": "llm",
            "model": "scripted:s/llm.yaml",
            "system": SYSTEM,
            "prompt": "{{ inputs.text }}",
        }
    },
    "outputs": {"summary": "{{ nodes.s.output }}"},
}


def run_summ(times: int) -> list[dict[str, Any]]:
    """Script steps of an agent calling `run_workflow summ` once a turn, then answering."""
    call = {"name": "run_workflow", "arguments": {"name": "summ", "inputs": {"text": "q3"}}}
    return [{"tool_calls": [call]}] * times + [{"text": "done"}]


def project(root: Path, fim: dict[str, Any], files: dict[str, Any]) -> Snapshot:
    """A project on disk (JSON is YAML), compiled as a user's files are."""
    files = {
        "fim.yaml": {"name": "wb", "state": "sqlite:///.fim/state.db", **fim},
        "s/llm.yaml": [{"text": "summary"}],
        "workflows/summ.yaml": SUMM,
        **files,
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    return compile_project(root)


def results(events: list[Event]) -> list[ToolResultEvent]:
    return [e for e in events if isinstance(e, ToolResultEvent)]


async def usage_rows(root: Path) -> dict[str, dict[str, Any]]:
    """The rows of `fim usage` by agent (a test's runs all fall on one UTC day)."""
    store = Store("sqlite:///.fim/state.db", root=root)
    try:
        return {row["agent"]: row for row in await summary(store)}
    finally:
        store.close()


async def start(snapshot: Snapshot, name: str, inputs: dict[str, Any]) -> list[Event]:
    """A workflow run on its own (`fim workflow run`): no agent run above it."""
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        return [e async for e in WorkflowEngine(snapshot, name, services).run(inputs)]
    finally:
        await services.aclose()


def failure(events: list[Event]) -> str:
    return next(e.error for e in events if e.type == "node_failed")


# ------------------------------------------------------------------ the tree of the request


async def test_an_llm_node_counts_toward_the_per_run_budget_of_the_agent_that_started_it(
    tmp_path: Path,
):
    """The first node's real count (about 2,300 tokens) is added to the boss's run: the
    second node's estimate (about 1,700) then passes the boss's `max_tokens` and its model
    is not called. The boss's own calls spend about 150 tokens."""
    boss = {"model": "scripted:s/boss.yaml", "workflows": ["summ"], "budget": {"max_tokens": 3000}}
    snapshot = project(tmp_path, {}, {"s/boss.yaml": run_summ(2), "agents/boss.yaml": boss})

    events = await run_events(snapshot, "boss", "summarise twice")

    first, second = results(events)
    assert not first.is_error and json.loads(first.content)["outputs"] == {"summary": "summary"}
    assert second.is_error
    assert "agent 'boss' budget (the run of 'boss' this one works for" in second.content
    assert "the model was not called" in second.content
    assert (await usage_rows(tmp_path))["workflow:summ"]["calls"] == 1


async def test_an_llm_node_is_a_run_of_the_tree_held_to_max_runs(tmp_path: Path):
    """The boss's run is run 1 of its request, node `a` run 2; with `max_runs: 2` node
    `b` is refused before its model is called."""
    two = {
        "description": "Two model calls in a row",
        "nodes": {
            "a": {"type": "llm", "model": "scripted:s/llm.yaml", "prompt": "first"},
            "b": {
                "type": "llm",
                "model": "scripted:s/llm.yaml",
                "prompt": "second",
                "needs": ["a"],
            },
        },
        "outputs": {"b": "{{ nodes.b.output }}"},
    }
    call = {"name": "run_workflow", "arguments": {"name": "two"}}
    files = {
        "workflows/two.yaml": two,
        "s/boss.yaml": [{"tool_calls": [call]}, {"text": "done"}],
        "agents/boss.yaml": {"model": "scripted:s/boss.yaml", "workflows": ["two"]},
    }
    snapshot = project(tmp_path, {"max_runs": 2}, files)

    (result,) = results(await run_events(snapshot, "boss", "go"))

    assert result.is_error
    failed = json.loads(result.content[result.content.index("{") :])["failed_nodes"]
    assert list(failed) == ["b"] and "above max_runs 2" in failed["b"]


# ------------------------------------------------------------------ daily budgets and usage


async def test_an_llm_nodes_calls_are_written_to_the_usage_table(tmp_path: Path):
    """One row per node run under agent `workflow:<name>`, every call of it counted (a
    rejected structured reply and its retry are two)."""
    triage = {
        "description": "Classify",
        "nodes": {
            "c": {
                "type": "llm",
                "model": "scripted:s/classify.yaml",
                "prompt": "Classify the ticket",
                "output_schema": {
                    "type": "object",
                    "properties": {"priority": {"type": "string"}},
                    "required": ["priority"],
                },
            }
        },
        "outputs": {"priority": "{{ nodes.c.output.priority }}"},
    }
    script = [{"text": "It is urgent."}, {"text": '{"priority": "high"}'}]
    snapshot = project(tmp_path, {}, {"workflows/triage.yaml": triage, "s/classify.yaml": script})

    events = await start(snapshot, "triage", {})

    assert events[-1].status == "ok"
    row = (await usage_rows(tmp_path))["workflow:triage"]
    assert (row["runs"], row["calls"]) == (1, 2) and row["total_tokens"] > 0


async def test_the_projects_daily_budget_counts_the_llm_nodes_that_ran_today(tmp_path: Path):
    """The first run's node spends about 2,300 tokens of a 3,000-token day: the second
    run's node is refused before its model is called."""
    snapshot = project(tmp_path, {"budget": {"max_tokens_per_day": 3000}}, {})

    first = await start(snapshot, "summ", {"text": "q3"})
    second = await start(snapshot, "summ", {"text": "q3"})

    assert first[-1].status == "ok"
    assert second[-1].status == "failed"
    assert failure(second).startswith("project budget (today, UTC)")
    assert "the model was not called" in failure(second)


def test_a_keys_daily_budget_counts_its_workflows_llm_nodes_over_http(tmp_path: Path):
    """A key's workflow runs spend its day like its agent runs do, and `GET /v1/usage`
    reports them; another key's day is its own."""
    server = {"api_keys": ["key-a", "key-b"], "key_budget": {"max_tokens_per_day": 3000}}
    snapshot = project(tmp_path, {"server": server}, {})
    a = {"Authorization": "Bearer key-a"}
    b = {"Authorization": "Bearer key-b"}
    body = {"inputs": {"text": "q3"}}

    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        runs = f"{srv.url}/v1/workflows/summ/runs"
        first = httpx.post(runs, json=body, headers=a, timeout=60).json()
        second = httpx.post(runs, json=body, headers=a, timeout=60).json()
        other = httpx.post(runs, json=body, headers=b, timeout=60).json()
        usage = httpx.get(f"{srv.url}/v1/usage", headers=a).json()

    assert first["status"] == "ok" and other["status"] == "ok"
    assert second["status"] == "failed"
    (failed,) = [e for e in second["events"] if e["type"] == "node_failed"]
    assert failed["error"].startswith("API key budget (today, UTC)")
    assert "server.key_budget.max_tokens_per_day 3000" in failed["error"]
    (row,) = usage["usage"]
    assert row["agent"] == "workflow:summ" and row["runs"] == 1
    assert usage["key_budget"]["spent_today_tokens"] == row["total_tokens"] > 2000


# ------------------------------------------------------------------ sessions


WORKER_INSTRUCTIONS = "Work through the task step by step. " * 200
"""The worker's system prompt: a worker run spends about 1,850 tokens (the lead's calls
count their tool definitions too: with 2,000 a run the third turn's lead was refused
before it could start the workflow)."""


async def test_a_workflows_agent_nodes_count_toward_the_session_of_the_run_that_started_it(
    tmp_path: Path,
):
    """As the run's delegates do: with 5,000 tokens a session and about 1,850 a worker
    run, the third turn's agent node is refused."""
    w = {
        "description": "Ask the worker",
        "nodes": {"a": {"type": "agent", "agent": "worker", "input": "work"}},
        "outputs": {"r": "{{ nodes.a.output }}"},
    }
    call = {"name": "run_workflow", "arguments": {"name": "w"}}
    files = {
        "workflows/w.yaml": w,
        "s/lead.yaml": [{"tool_calls": [call]}, {"text": "ok"}],
        "s/worker.yaml": [{"text": "worked"}],
        "agents/lead.yaml": {"model": "scripted:s/lead.yaml", "workflows": ["w"]},
        "agents/worker.yaml": {
            "model": "scripted:s/worker.yaml",
            "instructions": WORKER_INSTRUCTIONS,
        },
    }
    snapshot = project(tmp_path, {"budget": {"max_tokens_per_session": 5000}}, files)

    turns = [results(await run_events(snapshot, "lead", "go", session="s"))[0] for _ in range(3)]

    assert [t.is_error for t in turns] == [False, False, True]
    assert "project budget (session" in turns[2].content
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    try:
        # the two worker runs that ran, about 1,850 tokens each
        assert (await session_spent(store, "s", "worker")).total_tokens > 3500
    finally:
        store.close()


async def test_a_workflows_llm_nodes_count_toward_the_session_of_the_run_that_started_it(
    tmp_path: Path,
):
    files = {"s/boss.yaml": run_summ(1), "agents/boss.yaml": {
        "model": "scripted:s/boss.yaml", "workflows": ["summ"]}}  # fmt: skip
    snapshot = project(tmp_path, {}, files)

    await run_events(snapshot, "boss", "go", session="s")

    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    try:
        assert (await session_spent(store, "s", "workflow:summ")).total_tokens > 2000
    finally:
        store.close()
