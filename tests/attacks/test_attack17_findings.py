"""Attack round 17 (/work/notes/attack-17.md): the scale-out surfaces -- replicas and
`fim worker` processes on one PostgreSQL state store, background runs, approvals decided on
one process for a run on another.

Each test states the safe behaviour and is a strict xfail until its finding is fixed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.errors import RunError
from fim.run.queued import mark_queued, request_data
from fim.run.services import Services
from fim.server.app import create_app
from fim.server.callers import key_owner
from fim.store import get_store
from fim.testing.server import ServerThread
from fim.types import Message
from fim.workflows.admission import run_queued_agent
from fim.workflows.decision import decide
from fim.workflows.engine import WorkflowEngine, load_run

DENIED_NOTIFIES = """\
description: Needs a human; the customer is told either way
inputs:
  amount: {type: number}
nodes:
  approve:
    type: human
    prompt: "Refund {{ inputs.amount }}?"
    on_error: continue
  notify:
    type: tool
    tool: calculator
    needs: [approve]
    args: {expression: "0 - {{ inputs.amount }}"}
outputs:
  told: "{{ nodes.notify.status }}"
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


async def test_a_denied_human_node_is_resumed_by_one_process_only(tmp_path: Path) -> None:
    root = _write(
        tmp_path / "p",
        {
            "fim.yaml": 'name: d\nstate: "sqlite:///.fim/state.db"\n',
            "workflows/refund.yaml": DENIED_NOTIFIES,
        },
    )
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        engine = WorkflowEngine(snapshot, "refund", services)
        async for _event in engine.run({"amount": 40}):
            pass
        assert engine.state is not None and engine.state.status == "paused"
        run_id = engine.run_id
        state = await load_run(services, run_id)
        node = state.nodes["approve"]
        decl = snapshot.workflows["refund"]
        store = get_store(services)
        # what `WorkflowEngine.resume` does first, in replica A and in replica B, when two
        # `POST /v1/approvals/{id}` {"decision": "deny"} arrive together (a double click, a
        # load balancer's retry): both passed the route's `pending` check before either wrote
        await decide(store, decl, run_id, "approve", node.approval_id, False, None, "api:a")
        second: RunError | None = None
        try:
            await decide(store, decl, run_id, "approve", node.approval_id, False, None, "api:b")
        except RunError as exc:
            second = exc
    finally:
        await services.aclose()
    # safe: as for an approval (`consume_approval`), only one process continues the run
    assert second is not None and "already resumed" in second.message


async def test_a_queued_run_never_runs_on_a_snapshot_older_than_the_one_that_accepted_it(
    tmp_path: Path,
) -> None:
    plain = 'name: w\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-a]}\n'
    root = _write(
        tmp_path / "p",
        {
            "fim.yaml": plain,
            "w.yaml": (
                "- tool_calls: [{name: file_ops, arguments: "
                '{operation: write, path: pwned.txt, content: "x"}}]\n'
                "- text: done\n"
            ),
            "agents/writer.yaml": "description: d\nmodel: scripted:w.yaml\ntools: [file_ops]\n",
        },
    )
    worker_snapshot = compile_project(root)  # `fim worker -p` compiled this at its start
    (root / "fim.yaml").write_text(plain + "read_only: true\n")  # the operator locks down
    served = compile_project(root)  # `fim serve` reloaded and accepts the job under it
    assert served.version != worker_snapshot.version
    request = request_data([Message(role="user", content="go")], None, key_owner(b"key-a"), served)
    services = Services(providers=CAPABILITIES, root=root, state_url=served.project.state)
    try:
        await mark_queued(services, "r1", "agent", "writer", {"output": None, "events": []})
        # what the worker's job runs (fim.workflows.durable.make_app: run_agent_job), with
        # the snapshot its holder still has: nothing reloads it in `-p` mode
        await run_queued_agent(worker_snapshot, services, "r1", "writer", request)
        record = await get_store(services).get_run("r1")
    finally:
        await services.aclose()
    assert record is not None
    results = [e["content"] for e in record.data.get("events", []) if e["type"] == "tool_result"]
    written = list((root / ".fim").rglob("pwned.txt"))
    # safe: the run is refused or re-queued, or runs on the snapshot that accepted it
    # (read-only: the write is blocked); never the write on the older snapshot
    assert not written and not any(r.startswith("wrote") for r in results), (results, written)


def test_a_background_runs_queued_job_holds_no_secret(
    tmp_path: Path, pg_database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-attack17-0123456789abcdef"
    monkeypatch.setenv("A17_CRM_TOKEN", secret)
    db = pg_database("")
    root = _write(
        tmp_path / "p",
        {
            "fim.yaml": f'name: s\nstate: "{db.owner_url}"\nserver: {{api_keys: [key-a]}}\n',
            "s.yaml": '- text: "hi"\n',
            "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\n",
            "connectors/crm.yaml": (
                "kind: http\ndescription: crm\nbase_url: http://127.0.0.1:9\n"
                'auth: {type: bearer, token: "${A17_CRM_TOKEN}"}\n'
                "actions:\n  get: {description: get, method: GET, path: /x}\n"
            ),
        },
    )
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        answer = httpx.post(
            f"{srv.url}/v1/agents/a/runs",
            json={"input": f"my token is {secret}", "background": True},
            headers={"Authorization": "Bearer key-a"},
            timeout=30,
        )
    assert answer.status_code == 202, answer.text
    import psycopg

    with psycopg.connect(db.owner_url) as conn:
        rows = [str(r[0]) for r in conn.execute("SELECT args::text FROM procrastinate_jobs")]
        runs = [str(r[0]) for r in conn.execute("SELECT data::text FROM fim_runs")]
    assert rows and runs
    assert not any(secret in r for r in runs)  # the run record is masked (holds today)
    # safe: the job's copy of the request is masked like every other row of the store
    assert not any(secret in r for r in rows), rows
