"""Two `fim serve` processes on one PostgreSQL state store: runs and approvals are shared —
a workflow started on replica A, paused on a human node, is approved on replica B and
finishes; its record reads the same from both. A second server on one SQLite store is
refused."""

from __future__ import annotations

import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx

from fim.testing.cluster import until
from fim.testing.server import serve_process
from fim.testing.workflows import HUMAN_REFUND

ALICE = {"Authorization": "Bearer alice-key-0001"}
BOB = {"Authorization": "Bearer bob-key-0002"}


def project(root: Path, state: str) -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "agents").mkdir()
    (root / "fim.yaml").write_text(
        f'name: replicas\nstate: "{state}"\nserver: {{api_keys: [alice-key-0001, bob-key-0002]}}\n'
    )
    (root / "workflows" / "refund.yaml").write_text(HUMAN_REFUND)
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    return root


def test_an_approval_on_replica_b_finishes_a_run_started_on_a(tmp_path: Path, pg_database):
    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    with ExitStack() as stack:
        a, b = (stack.enter_context(serve_process(root)) for _ in range(2))
        # a session started on A continues on B, and stays its owner's on both (bob's `s1`
        # is a session of his own)
        turn = {"input": "hi", "session_id": "s1"}
        assert httpx.post(f"{a}/v1/agents/echo/runs", json=turn, headers=ALICE).status_code == 200
        bobs = {**turn, "input": "bob"}
        assert httpx.post(f"{b}/v1/agents/echo/runs", json=bobs, headers=BOB).status_code == 200
        again = httpx.post(f"{b}/v1/agents/echo/runs", json=turn, headers=ALICE)
        assert again.status_code == 200 and again.json()["session_id"] == "s1"
        import psycopg

        from fim.run.sessions import session_key
        from fim.server.http import key_owner

        alices = session_key(key_owner(b"alice-key-0001"), "s1")
        with psycopg.connect(db.owner_url) as conn:
            (messages,) = conn.execute(
                "SELECT messages FROM fim_sessions WHERE id = %s", (alices,)
            ).fetchone()
        assert [m["content"] for m in messages] == ["hi", "pong", "hi", "pong"]

        started = httpx.post(
            f"{a}/v1/workflows/refund/runs", json={"inputs": {"amount": 40}}, headers=ALICE
        )
        assert started.status_code == 200, started.text
        run_id = started.json()["run_id"]
        assert started.json()["status"] == "paused"
        assert httpx.get(f"{b}/v1/runs/{run_id}", headers=ALICE).json()["status"] == "paused"
        (pending,) = httpx.get(f"{b}/v1/approvals", headers=ALICE).json()["approvals"]
        assert pending["run_id"] == run_id
        decided = httpx.post(
            f"{b}/v1/approvals/{pending['id']}", json={"decision": "approve"}, headers=ALICE
        )
        assert decided.status_code == 200, decided.text

        def finished() -> dict | None:
            record = httpx.get(f"{a}/v1/runs/{run_id}", headers=ALICE).json()
            return record if record["status"] not in ("paused", "running") else None

        record = until(finished, timeout=20, what="the approved run finished")
        assert record["status"] == "ok", record  # type: ignore[index]
        assert httpx.get(f"{b}/v1/runs/{run_id}", headers=ALICE).json()["status"] == "ok"
        assert httpx.get(f"{a}/v1/approvals", headers=ALICE).json()["approvals"] == []


def test_a_second_server_on_one_sqlite_store_exits_with_a_clear_message(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    with serve_process(root):
        second = subprocess.run(
            [sys.executable, "-m", "fim.cli", "serve", "-p", str(root), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert second.returncode == 1
    assert "already used by a server (pid" in second.stderr and "PostgreSQL" in second.stderr
