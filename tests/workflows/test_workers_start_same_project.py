"""A `fim serve --workers N` worker started later serves what the rest of the fleet serves
(attack-47 F2, F3, F10).

- Its state store is the one the supervisor checked at start, whatever `state:` says on
  disk now: a replaced worker opened an edited `state:` and split the fleet across two
  stores (a run created on one worker was a 404 on the other; approvals, sessions and
  budgets apart). A `state:` that differs is logged; it takes effect at a restart.
- With `--no-reload` it serves the start's project only: a replaced worker served an
  unreviewed edit on disk (a `shell` tool added) on some requests. It refuses instead.
- SIGHUP's restart waits long enough for a new worker that compiles the project twice
  (the `python -I` child, then itself): uvicorn's 5 s aborted every log rotation after
  any accepted Python edit when a module imported slowly.
- When every worker refused, the supervisor says that no worker is serving (the port
  still takes connections, which no one answers), not that "the others" keep serving.

The test with real processes needs PostgreSQL (`--workers 2`) and costs a few seconds of
CPU (three interpreters, each compiling the project): a replaced worker is only seen so."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.vet import VET_TIMEOUT_S, fingerprint
from fim.server import workers
from tests.workflows.test_workers_reload_gate import (
    KEY,
    Base,
    Worker,
    lines,
    project,
    serving,
    statuses,
    until,
)


def test_a_replaced_worker_keeps_the_store_the_fleet_uses(tmp_path: Path, pg_database: Any) -> None:
    started, edited = pg_database("").owner_url, pg_database("").owner_url
    root = project(tmp_path / "p", started)
    log = tmp_path / "serve.log"
    auth = {"Authorization": f"Bearer {KEY}"}
    with serving(root, log) as (url, _):
        before = statuses(url)
        fim_yaml = root / "fim.yaml"
        fim_yaml.write_text(fim_yaml.read_text().replace(started, edited))
        until(
            lambda: all(
                w["snapshot"] != before[p]["snapshot"] for p, w in statuses(url, want=2).items()
            ),
            "both workers reloaded the edit",
            log,
        )
        gone = sorted(before)[0]
        os.kill(gone, signal.SIGKILL)  # a crash: uvicorn starts another on the edited disk
        until(lambda: gone not in (s := statuses(url, want=2)) and len(s) == 2, "a new worker", log)
        for _ in range(3):
            made = httpx.post(f"{url}/v1/agents/a/runs", json={"input": "hi"}, headers=auth)
            run = made.json()["run_id"]
            found = {httpx.get(f"{url}/v1/runs/{run}", headers=auth).status_code for _ in range(8)}
            assert found == {200}  # whichever worker takes the lookup: one store
    assert lines(log, "fim serve keeps using") >= 3  # two reloads and the new worker's start
    assert "Traceback" not in log.read_text()


# ------------------------------------------------------------------ a worker's start, here


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return project(tmp_path / "p", "sqlite:///.fim/state.db", server="api_keys: []")


def _options(root: Path, reload: bool) -> dict[str, Any]:
    """What the supervisor hands its workers, having compiled `root` at start."""
    accepted = fingerprint(compile_project(root))
    return {"host": "127.0.0.1", "port": 8000, "accepted": accepted, "reload": reload}


def test_with_no_reload_a_worker_refuses_a_project_the_start_did_not_compile(
    local: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = _options(local, reload=False)
    workers.start_snapshot(local, options)  # the start's project: served
    (local / "agents" / "a.yaml").write_text(
        "description: work in progress\nmodel: scripted:pong.yaml\ntools: [calculator, shell]\n"
    )
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as ended:
        workers.start_snapshot(local, options)
    assert ended.value.code == workers.REFUSED
    (record,) = caplog.records
    assert "with --no-reload every worker serves that one only" in record.getMessage()


def test_with_reload_on_a_worker_serves_the_edit_the_others_reloaded(local: Path) -> None:
    options = _options(local, reload=True)
    (local / "agents" / "a.yaml").write_text(
        "description: reviewed\nmodel: scripted:pong.yaml\ninstructions: hi\n"
    )
    assert workers.start_snapshot(local, options).agents["a"].description == "reviewed"


def test_a_state_that_is_not_the_fleets_is_logged_once_per_change(
    local: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot = compile_project(local)  # state: the SQLite file
    gate = workers.store_kept("postgresql://fim:s3cret-pw@db/fim")
    with caplog.at_level(logging.WARNING):
        assert gate(snapshot, snapshot) == []  # a worker's start on that disk
        assert gate(snapshot, compile_project(local)) == []  # a reload changing nothing
    (record,) = caplog.records
    assert "fim serve keeps using postgresql://fim:***@db/fim" in record.getMessage()
    assert "s3cret-pw" not in record.getMessage()


# ------------------------------------------------------------------ the supervisor


class Fleet(Base):
    """`Base` with uvicorn's SIGHUP restart, which reads the readiness limit."""

    def __init__(self) -> None:
        super().__init__()
        self.config = type("Config", (), {"timeout_worker_healthcheck": 5})()
        self.waited: list[float] = []

    def restart_all(self) -> None:
        self.waited.append(self.config.timeout_worker_healthcheck)


def test_sighup_waits_for_a_new_worker_that_compiles_twice() -> None:
    fleet = workers.supervisor(Fleet, None)()
    fleet.restart_all()
    assert fleet.waited == [workers.READY_S] and workers.READY_S >= 2 * VET_TIMEOUT_S
    assert fleet.config.timeout_worker_healthcheck == 5  # a hung worker's ping: uvicorn's


def test_the_supervisor_says_when_no_worker_is_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    fleet = workers.supervisor(Fleet, None, clock=lambda: now[0])()
    with caplog.at_level(logging.INFO, logger="fim.server"):
        fleet.processes[0].exitcode = workers.REFUSED
        fleet.keep_subprocess_alive()
        fleet.processes[1].exitcode = workers.REFUSED
        fleet.keep_subprocess_alive()
    first, second = (r.getMessage() for r in caplog.records)
    assert "1 other worker(s) serving" in first
    assert caplog.records[1].levelno == logging.ERROR
    assert second.startswith("fim serve: no worker is serving: worker [2] refused")
    assert "readiness fails" in second


class Racing(Fleet):
    """uvicorn's check of a worker that exits while it is pinged (its refusal's line
    written, the interpreter ending): uvicorn replaces it at once, unheld."""

    def __init__(self) -> None:
        super().__init__()
        self.exiting, self.killed = 0, []

    def keep_subprocess_alive(self) -> None:
        for i, worker in enumerate(self.processes):
            if worker.pid == self.exiting:
                worker.exitcode = workers.REFUSED
            if worker.exitcode is not None:
                self.started += 1
                self.processes[i] = born = Worker(self.started)
                born.kill = lambda pid=born.pid: self.killed.append(pid)  # type: ignore[attr-defined]
                born.join = lambda: None  # type: ignore[attr-defined]


def test_a_worker_refusing_while_uvicorn_pings_it_is_held_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    fleet = workers.supervisor(Racing, None, clock=lambda: now[0])()
    fleet.exiting = 1
    with caplog.at_level(logging.INFO, logger="fim.server"):
        fleet.keep_subprocess_alive()
        assert [p.pid for p in fleet.processes] == [1, 2] and fleet.killed == [3]
        fleet.keep_subprocess_alive()  # held now, and said
    assert [p.pid for p in fleet.processes] == [1, 2]
    assert "worker [1] is replaced in 1 s" in caplog.text
    now[0] = 1.0
    fleet.exiting = 0
    fleet.keep_subprocess_alive()
    assert [p.pid for p in fleet.processes] == [4, 2]
