"""`GET /readyz` says whether a replica can serve (its state store answers), `/healthz`
stays liveness, and a store failure during a request is a 503 `store_unavailable` with
one log line, never a 500 and a traceback (newcomer7 #2).

An orchestrator's readiness probe on `/healthz` marked every pod of a rollout Ready
although a typo in the store's secret made every run fail; the OpenAI SDKs then retried
each 500 twice, tripling the load on the broken backend.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project, ServerSettings
from fim.server.app import create_app
from fim.store import health
from fim.store.health import StoreProbe
from fim.testing.server import ServerThread

KEY = "k-readyz"
OPERATOR = "k-readyz-operator"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def snapshot(root: Path, state: str) -> Snapshot:
    model = ModelSettings(model="openai/local", api_base=f"http://127.0.0.1:{closed_port()}/v1")
    server = ServerSettings(api_keys=[KEY], operator_keys=[OPERATOR])
    project = Project(name="ready", state=state, server=server)
    return Snapshot(root=root, project=project, agents={"a": AgentDecl(name="a", model=model)})


@pytest.fixture
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every probe asks the store (no answer reused), so a test sees a change at once."""
    monkeypatch.setattr(health, "PROBE_EVERY", 0.0)


def test_readyz_is_200_without_a_key_and_status_names_the_store(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, f"sqlite:///{tmp_path}/state/fim.db")
    with ServerThread(create_app(SnapshotHolder(snap))) as srv:
        ready = httpx.get(f"{srv.url}/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"ok": True, "snapshot": snap.version}
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
        assert httpx.get(f"{srv.url}/v1/status").status_code == 401  # still keyed
        status = httpx.get(f"{srv.url}/v1/status", headers={"Authorization": f"Bearer {KEY}"})
        assert status.json()["store"] == {"ok": True}  # a tenant: whether, never why
        status = httpx.get(f"{srv.url}/v1/status", headers={"Authorization": f"Bearer {OPERATOR}"})
        assert status.json()["store"] == {"ok": True, "error": None}


def test_readyz_is_503_when_the_store_goes_away_and_200_when_it_is_back(
    tmp_path: Path, pg_database: Callable[[str], Any], fresh_probe: None
) -> None:
    db = pg_database("")
    snap = snapshot(tmp_path, db.owner_url)

    def connections(allowed: bool) -> None:
        with psycopg.connect(db.admin_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as c:
            c.execute(f"ALTER DATABASE {db.name} ALLOW_CONNECTIONS {str(allowed).lower()}")
            if not allowed:
                c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (db.name,),
                )

    with ServerThread(create_app(SnapshotHolder(snap))) as srv:
        assert httpx.get(f"{srv.url}/readyz").status_code == 200
        connections(False)
        try:
            gone = httpx.get(f"{srv.url}/readyz")
            assert gone.status_code == 503
            assert gone.json()["ok"] is False
            assert "state store does not answer" in gone.json()["reason"]
            assert db.name not in gone.text  # anyone may ask: no host, role or database
            status = httpx.get(
                f"{srv.url}/v1/status", headers={"Authorization": f"Bearer {OPERATOR}"}
            ).json()
            assert status["store"]["ok"] is False
            assert status["store"]["error"].startswith("state store postgresql+psycopg://")
            assert db.name in status["store"]["error"]
        finally:
            connections(True)
        assert httpx.get(f"{srv.url}/readyz").status_code == 200


def test_a_store_failure_during_a_request_is_a_503_store_unavailable_and_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from openai import InternalServerError, OpenAI

    caplog.set_level(logging.INFO)
    snap = snapshot(tmp_path, f"postgresql://app:pw@127.0.0.1:{closed_port()}/fim")
    keyed = {"Authorization": f"Bearer {KEY}"}
    with ServerThread(create_app(SnapshotHolder(snap))) as srv:
        listed = httpx.get(f"{srv.url}/v1/runs", headers=keyed)
        assert listed.status_code == 503
        assert listed.headers["x-should-retry"] == "false"
        assert listed.json()["error"]["code"] == "store_unavailable"
        assert listed.json()["error"]["type"] == "server_error"
        assert "pw" not in listed.text and "127.0.0.1" not in listed.text

        client = OpenAI(base_url=f"{srv.url}/v1", api_key=KEY, max_retries=2)
        with pytest.raises(InternalServerError) as caught:  # asked once: not retried
            client.chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "hi"}],
                extra_body={"session_id": "s"},
            )
        assert caught.value.status_code == 503
    failures = [r for r in caplog.records if r.name == "fim.server" and r.levelno >= logging.ERROR]
    assert [r.getMessage().split(":")[0] for r in failures] == [
        "state store unavailable on /v1/runs",
        "state store unavailable on /v1/chat/completions",
    ]
    assert all(r.exc_info is None for r in failures)  # one line each, no traceback
    assert (
        sum(
            "/v1/chat/completions" in r.getMessage()
            for r in caplog.records
            if r.name == "fim.access"
        )
        == 1
    )


def test_a_probe_asks_the_store_once_per_interval() -> None:
    asked: list[str] = []
    now = [100.0]

    class Store:
        display_url = "sqlite:///x"

        async def _read(self, work: Any) -> None:
            asked.append("SELECT 1")

    probe = StoreProbe(lambda: Store(), every=5.0, clock=lambda: now[0])

    async def ask(times: int) -> list[tuple[bool, str | None]]:
        return [await probe.state() for _ in range(times)]

    assert asyncio.run(ask(10)) == [(True, None)] * 10
    assert len(asked) == 1
    now[0] += 5.0
    asyncio.run(ask(3))
    assert len(asked) == 2
