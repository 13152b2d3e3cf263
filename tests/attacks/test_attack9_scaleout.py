"""Attack round 9 (/work/notes/attack-9.md): runs that outlive their request -- queued for a
`fim worker`, resumed after a reload, re-run after a crash -- keep the limits, the key and
the record of the run that was accepted.

Each test states the safe behaviour; each was a strict xfail until its finding was fixed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.idempotency import idempotency_key
from fim.run.queued import mark_queued, request_data
from fim.run.services import Services
from fim.server.app import create_app
from fim.server.callers import key_owner
from fim.store import get_store
from fim.testing.server import ServerThread
from fim.types import Message
from fim.workflows.admission import run_queued_agent
from fim.workflows.engine import WorkflowEngine, load_run


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_keys_queued_runs_stay_within_its_max_parallel_runs(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = _write(
        tmp_path / "p",
        {
            "fim.yaml": (
                f'name: q\nstate: "{db.owner_url}"\n'
                "server: {api_keys: [key-a, key-b], key_limits: {max_parallel_runs: 1}}\n"
            ),
            "s.yaml": '- text: "hi"\n',
            "agents/slow.yaml": "description: d\nmodel: scripted:s.yaml\n",
        },
    )
    a = {"Authorization": "Bearer key-a"}
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        codes = [
            httpx.post(
                f"{srv.url}/v1/agents/slow/runs",
                json={"input": "x", "background": True},
                headers=a,
                timeout=30,
            ).status_code
            for _ in range(4)
        ]
    import psycopg

    with psycopg.connect(db.owner_url) as conn:
        locks = [row[0] for row in conn.execute("SELECT lock FROM procrastinate_jobs")]
    accepted = codes.count(202)
    # safe: refused past the limit (429), or queued in the key's own lane(s) so that
    # procrastinate runs at most max_parallel_runs of them at once
    assert accepted == 1 or len(set(locks)) <= 1, (codes, locks)


async def test_a_queued_run_of_a_revoked_key_does_not_run(tmp_path: Path) -> None:
    root = _write(
        tmp_path / "p",
        {
            "fim.yaml": 'name: r\nstate: "sqlite:///.fim/state.db"\n'
            "server: {api_keys: [key-a, key-b]}\n",
            "s.yaml": (
                '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n'
                '- text: "spent"\n'
            ),
            "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\ntools: [calculator]\n",
        },
    )
    accepted = compile_project(root)  # the server that queued the run
    request = request_data(
        [Message(role="user", content="go")], None, key_owner(b"key-a"), accepted
    )
    (root / "fim.yaml").write_text(
        'name: r\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-b]}\n'
    )  # the operator revokes key-a before a worker takes the job
    revoked = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=revoked.project.state)
    try:
        await mark_queued(services, "r1", "agent", "a", {"output": None, "events": []})
        # what `fim worker`'s job runs (fim.workflows.durable.make_app: run_agent_job)
        await run_queued_agent(revoked, services, "r1", "a", request)
        record = await get_store(services).get_run("r1")
    finally:
        await services.aclose()
    assert record is not None
    ran = [e for e in record.data.get("events", []) if e["type"] in ("llm_call", "tool_result")]
    assert record.status != "ok" and not ran, (record.status, ran)


META_SERVER = f"""
import contextlib
import json
import sys

sys.path.insert(0, {str(Path(__file__).parents[1] / "mcp_servers")!r})
with contextlib.suppress(ImportError):  # the test process's warm MCP process runs it
    __import__("launch").relay(__file__)

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("meta", log_level="WARNING")


@server.tool(description="Create an order (a side effect); answers the request's _meta")
def create(ctx: Context) -> str:
    meta = ctx.request_context.meta
    if hasattr(meta, "model_dump"):
        meta = meta.model_dump()
    return json.dumps({{"meta": meta}}, default=str)


server.run("stdio")
"""


async def test_an_mcp_nodes_call_carries_its_idempotency_key_to_the_server(tmp_path: Path) -> None:
    (tmp_path / "meta_server.py").write_text(META_SERVER)
    root = _write(
        tmp_path / "p",
        {
            "fim.yaml": 'name: m\nstate: "sqlite:///.fim/state.db"\nmcp_servers:\n'
            f"  meta: {{command: {sys.executable}, args: [{tmp_path / 'meta_server.py'}]}}\n",
            "workflows/f.yaml": (
                "nodes:\n  order: {type: mcp, server: meta, tool: create, args: {}}\n"
            ),
        },
    )
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        engine = WorkflowEngine(snapshot, "f", services)
        async for _ in engine.run({}):
            pass
    finally:
        await services.aclose()
    assert engine.state is not None and engine.state.status == "ok", engine.state
    seen = json.dumps(engine.state.nodes["order"].output)
    # safe: a re-run after a worker crash sends the same key, for the server to deduplicate
    assert idempotency_key(engine.run_id, "order") in seen, seen


async def test_a_resumed_run_records_the_snapshot_its_remaining_nodes_ran_on(
    tmp_path: Path,
) -> None:
    root = _write(
        tmp_path / "p",
        {
            "fim.yaml": 'name: v\nstate: "sqlite:///.fim/state.db"\n',
            "v1.yaml": '- text: "ran on v1"\n',
            "v2.yaml": '- text: "ran on v2"\n',
            "agents/w.yaml": "description: d\nmodel: scripted:v1.yaml\n",
            "workflows/f.yaml": (
                "nodes:\n  ok: {type: human, prompt: go?}\n"
                "  work: {type: agent, agent: w, input: hi, needs: [ok]}\n"
                "outputs: {said: '{{ nodes.work.output }}'}\n"
            ),
        },
    )
    v1 = compile_project(root)
    (root / "agents" / "w.yaml").write_text("description: d\nmodel: scripted:v2.yaml\n")
    v2 = compile_project(root)  # a reload (or GitOps pull) while the run waits
    services = Services(providers=CAPABILITIES, root=root, state_url=v1.project.state)
    try:
        first = WorkflowEngine(v1, "f", services)
        async for _ in first.run({}):
            pass
        async for _ in WorkflowEngine(v2, "f", services).resume(first.run_id, True):
            pass
        state = await load_run(services, first.run_id)
    finally:
        await services.aclose()
    assert state.outputs == {"said": "ran on v2"}  # the node ran on v2 ...
    assert v2.version in json.dumps(state.to_dict()), state.snapshot_version  # ... and says so
