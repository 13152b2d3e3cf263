"""`read_only: true` (an agent's, or the project's) holds in every mode, with or without a
declared hook, and in `fim eval`, which bypasses hooks but not read-only.

It used to be enforced only by the `readonly_guard` hook, and only when an agent declared
that hook: an agent marked `read_only: true` with no hooks wrote to a writable database,
and `fim eval` (hooks off) let every read-only agent write.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.testing.runs import run_events, services_for
from fim.workflows.engine import WorkflowEngine


def write_project(root: Path, mode: str, where: str) -> Path:
    db = root / "shop.db"
    root.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO orders VALUES (1)")
    delete = "DELETE FROM orders"
    call = (
        {"name": "shop__query", "arguments": {"sql": delete}}
        if mode == "legacy"
        else {
            "name": "database",
            "arguments": {"subcommand": "query", "database": "shop", "sql": delete},
        }
    )
    project = {"name": "ro", "state": "sqlite:///.fim/state.db", "tool_modes": {"databases": mode}}
    agent = {"description": "Reads orders", "model": "scripted:s.yaml", "connectors": ["shop"]}
    if where == "project":
        project["read_only"] = True
    else:
        agent["read_only"] = True
    files = {
        "fim.yaml": project,
        "connectors/shop.yaml": {"kind": "database", "url": f"sqlite:///{db}", "read_only": False},
        "s.yaml": [{"tool_calls": [call]}, {"text": "done"}],
        "agents/reader.yaml": agent,
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    return root


@pytest.mark.parametrize("hooks", [True, False], ids=["run", "eval"])
@pytest.mark.parametrize("where", ["agent", "project"])
@pytest.mark.parametrize("mode", ["legacy", "progressive"])
async def test_read_only_holds_without_a_declared_guard_and_in_eval(
    tmp_path: Path, mode: str, where: str, hooks: bool
) -> None:
    root = write_project(tmp_path / "p", mode, where)
    events = await run_events(compile_project(root), "reader", "clean up", hooks=hooks)
    (result,) = [e for e in events if e.type == "tool_result"]
    assert result.is_error and "may only read" in result.content, result.content
    with sqlite3.connect(root / "shop.db") as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (1,)


@pytest.mark.parametrize("hooks", [True, False], ids=["run", "eval"])
async def test_read_only_follows_the_call_into_a_delegate_and_a_workflow(
    tmp_path: Path, hooks: bool
) -> None:
    """The read-only agent hands the DELETE to a writer agent and to a workflow's sql node;
    then the workflow runs on its own in the (read-only) project."""
    root = write_project(tmp_path / "p", "legacy", "agent")
    delete = {"name": "shop__query", "arguments": {"sql": "DELETE FROM orders"}}
    boss = [
        {
            "tool_calls": [
                {"name": "call_agent", "arguments": {"agent": "writer", "task": "delete"}},
                {"name": "run_workflow", "arguments": {"name": "wipe", "inputs": {}}},
            ]
        },
        {"text": "done"},
    ]
    files = {
        "boss.yaml": boss,
        "writer.yaml": [{"tool_calls": [delete]}, {"text": "deleted"}],
        "agents/reader.yaml": {
            "description": "Reads",
            "model": "scripted:boss.yaml",
            "read_only": True,
            "delegates": ["writer"],
            "workflows": ["wipe"],
        },
        "agents/writer.yaml": {
            "description": "Writes",
            "model": "scripted:writer.yaml",
            "connectors": ["shop"],
        },
        "workflows/wipe.yaml": {
            "description": "Deletes",
            "nodes": {
                "gone": {"type": "database", "connector": "shop", "sql": "DELETE FROM orders"}
            },
        },
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    snapshot = compile_project(root)
    events = await run_events(snapshot, "reader", "clean up", hooks=hooks)
    results = {e.name: e.content for e in events if e.type == "tool_result"}
    assert results["call_agent"] == "deleted"  # the writer ran, and its DELETE was refused
    assert "may only read" in results["run_workflow"]
    with sqlite3.connect(root / "shop.db") as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (1,)

    project = json.loads((root / "fim.yaml").read_text())
    (root / "fim.yaml").write_text(json.dumps({**project, "read_only": True}))
    snapshot = compile_project(root)
    services = services_for(snapshot)
    try:
        engine = WorkflowEngine(snapshot, "wipe", services, hooks=hooks)
        flow = [e async for e in engine.run({})]
    finally:
        await services.aclose()
    assert flow[-1].status == "failed" and "may only read" in json.dumps(
        [e.model_dump() for e in flow]
    )
    with sqlite3.connect(root / "shop.db") as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (1,)


async def test_a_rate_limit_counts_what_delegates_and_workflows_call(tmp_path: Path) -> None:
    """The caller's `rate_limit` holds in its delegates and workflows, as its read-only
    does: a limit of one write a minute allowed one more through every delegate and every
    workflow the agent could start, each counted in a window of its own."""
    root = tmp_path / "p"
    write = {"name": "file_ops", "arguments": {"operation": "write", "path": "f.txt"}}
    files = {
        "fim.yaml": {"name": "rl", "state": "sqlite:///.fim/state.db"},
        "boss.yaml": [
            {"tool_calls": [{**write, "arguments": {**write["arguments"], "content": "boss"}}]},
            {"tool_calls": [{"name": "call_agent", "arguments": {"agent": "helper", "task": "w"}}]},
            {"tool_calls": [{"name": "run_workflow", "arguments": {"name": "more", "inputs": {}}}]},
            {"text": "done"},
        ],
        "helper.yaml": [
            {"tool_calls": [{**write, "arguments": {**write["arguments"], "content": "helper"}}]},
            {"text": "helped"},
        ],
        "agents/boss.yaml": {
            "description": "Writes once a minute",
            "model": "scripted:boss.yaml",
            "tools": ["file_ops"],
            "delegates": ["helper"],
            "workflows": ["more"],
            "hooks": [
                {"use": "rate_limit", "matcher": "file_ops", "with": {"max_calls": 1}},
            ],
        },
        "agents/helper.yaml": {
            "description": "Writes",
            "model": "scripted:helper.yaml",
            "tools": ["file_ops"],
        },
        "workflows/more.yaml": {
            "description": "Writes",
            "nodes": {
                "w": {
                    "type": "tool",
                    "tool": "file_ops",
                    "args": {"operation": "write", "path": "f.txt", "content": "workflow"},
                }
            },
        },
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    events = await run_events(compile_project(root), "boss", "write")
    results = {e.name: e.content for e in events if e.type == "tool_result"}
    assert results["file_ops"].startswith("wrote")  # the boss's own write, the one allowed
    assert "rate limit reached: agent 'boss'" in results["run_workflow"]
    assert results["call_agent"] == "helped"  # the helper answered; its write was refused
    assert (root / ".fim" / "sandbox" / "f.txt").read_text() == "boss"  # the only write
