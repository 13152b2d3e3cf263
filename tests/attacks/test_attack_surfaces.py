"""A PreToolUse guard holds on the surfaces the hook-view tests do not drive.

tests/hooks/test_hook_view.py attacks `fim run` and `POST /v1/agents/{name}/runs` (legacy and
progressive MCP, a delegate, a workflow node). Here one `fim serve` runs a hostile model
(it always calls the calculator) behind a command hook that blocks the calculator, and the
call arrives through every other door: the OpenAI-compatible endpoint (plain and streamed),
A2A JSON-RPC, the MCP surface, a background run, and an agent on the DAG engine. Every run
the server stored must show the block and no calculator result.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.testing.server import ServerThread
from tests.server.test_background_runs import finished

GUARD = {
    "event": "PreToolUse",
    "matcher": "calculator",
    "command": "echo calculator-guard said no >&2; exit 2",
}
CALL = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}
PLAN = {
    "steps": [
        {"id": "s1", "task": "compute", "depends_on": []},
        {"id": "s2", "task": "report", "depends_on": ["s1"]},
    ]
}


def write_project(root: Path) -> Path:
    files: dict[str, Any] = {
        "fim.yaml": {"name": "surfaces", "state": "sqlite:///.fim/state.db"},
        "react.script.yaml": [CALL, {"text": "done"}],
        # planner, step s1 (calls, then answers), step s2, analyzer, writer
        "dag.script.yaml": [
            {"text": json.dumps(PLAN)},
            CALL,
            {"text": "s1 done"},
            {"text": "s2 done"},
            {"text": json.dumps({"done": True, "reason": "ok"})},
            {"text": "done"},
        ],
        "agents/calc.yaml": {
            "description": "Calculates",
            "model": "scripted:react.script.yaml",
            "tools": ["calculator"],
            "hooks": [GUARD],
        },
        "agents/planner.yaml": {
            "description": "Plans",
            "engine": "dag",
            "model": "scripted:dag.script.yaml",
            "tools": ["calculator"],
            "hooks": [GUARD],
        },
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    return root


async def _mcp_call(url: str) -> str:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx.AsyncClient(timeout=30)
    async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        result = await client.call_tool("calc", {"input": "6*7?"})
    return "".join(c.text for c in result.content if c.type == "text")


def test_a_guard_holds_on_every_http_surface_and_engine(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    chat = {"model": "calc", "messages": [{"role": "user", "content": "6*7?"}]}
    a2a = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "role": "user",
                "parts": [{"kind": "text", "text": "6*7?"}],
                "messageId": "m1",
                "kind": "message",
            }
        },
    }
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        url = srv.url
        plain = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60)
        assert plain.status_code == 200, plain.text
        streamed = httpx.post(f"{url}/v1/chat/completions", json={**chat, "stream": True})
        assert streamed.status_code == 200 and b"[DONE]" in streamed.content
        sent = httpx.post(f"{url}/a2a/calc", json=a2a, timeout=60).json()
        assert sent["result"]["status"]["state"] == "completed", sent
        assert asyncio.run(_mcp_call(url)).startswith("done")
        queued = httpx.post(f"{url}/v1/agents/calc/runs", json={"input": "x", "background": True})
        assert queued.status_code == 202
        finished(url, queued.json()["run_id"])
        dag = httpx.post(f"{url}/v1/agents/planner/runs", json={"input": "x"}, timeout=60)
        assert dag.status_code == 200 and dag.json()["output"] == "done", dag.text
        runs = httpx.get(f"{url}/v1/runs?limit=50").json()["runs"]
        records = [httpx.get(f"{url}/v1/runs/{r['id']}").json() for r in runs]

    assert sorted(r["name"] for r in records) == ["calc"] * 5 + ["planner"]
    for record in records:
        events = record["data"]["events"]
        results = [e for e in events if e["type"] == "tool_result"]
        blocks = [e for e in events if e["type"] == "hook" and e["decision"] == "block"]
        assert len(results) == 1 and len(blocks) == 1, (record["agent"], events)
        assert results[0]["content"].startswith("Blocked:"), results
        assert "calculator-guard said no" in blocks[0]["reason"]
