"""A `fim serve --workers N` worker started later judges the disk as a reload does
(attack-46 F1).

Every running worker rejected a reload that dropped the API keys, but a worker started
afterwards (one that died and was replaced, SIGHUP's restart, SIGTTIN) compiled the disk
with no gate and no child process check, and served it: without keys, with Python a
reload had refused. Now a worker's start applies the rule `fim serve` starts by and
checks new Python in a `python -I` child first (unless it is the very project the parent
compiled at start). A worker it refuses logs one line and exits (`REFUSED`, not uvicorn's
STARTUP_FAILURE, on which the parent would stop every worker); the supervisor starts it
again later, with a growing wait, while the others keep serving their snapshot.

The tests with real processes need PostgreSQL (`--workers 2`) and cost a few seconds of
CPU each (three interpreters, each compiling the project): a worker's start and the
supervisor's restarts are only seen that way."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.vet import fingerprint
from fim.server import workers
from fim.testing.server import fim_serve_on_any_port

KEY = "k-0123456789abcdef"
KEYED = "api_keys: ['${FIM_KEY}']"
KEYLESS = "api_keys: ['${FIM_KEY_TYPO:-}']"
TOOL = '\ndef add(a: int, b: int) -> int:\n    """Add."""\n    return a + b\n'
MARKER = """import os, sys
with open(os.path.join(os.path.dirname(__file__), "..", "ran.txt"), "a") as f:
    f.write(f"{sys.flags.isolated}\\n")
"""
"""Top-level code that notes whether it ran in the `python -I` child (1) or a worker (0)."""


def project(root: Path, state: str, server: str = KEYED) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "fim.yaml").write_text(f'name: gate\nstate: "{state}"\nserver:\n  {server}\n')
    (root / "hooks" / "calc.py").write_text(TOOL)
    (root / "agents" / "a.yaml").write_text(
        "description: a\nmodel: scripted:pong.yaml\ninstructions: hi\ntools: ['calc:add']\n"
    )
    return root


def until(check: Callable[[], Any], what: str, log: Path, timeout: float = 60) -> Any:
    """`check()`'s first truthy answer (a request that fails counts as none)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what}:\n{log.read_text()[-4000:]}")


def statuses(url: str, tries: int = 40, want: int = 0) -> dict[int, dict[str, Any]]:
    """pid -> /v1/status of each worker that answered, over fresh connections; a wait for
    `want` workers stops asking once that many answered (40 requests a poll took the CPU a
    starting worker needs)."""
    seen: dict[int, dict[str, Any]] = {}
    for _ in range(tries):
        body = httpx.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {KEY}"}).json()
        seen[body["pid"]] = body
        if want and len(seen) >= want:
            break
    return seen


def lines(log: Path, text: str) -> int:
    return log.read_text(errors="replace").count(text)


@contextmanager
def serving(root: Path, log: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """`fim serve --workers 2` on `root` (reload on): its URL and pid once both workers
    answer (on a port the system chose: no other server answers there)."""
    env = {**os.environ, "FIM_KEY": KEY}
    env.pop("FIM_KEY_TYPO", None)
    with fim_serve_on_any_port(root, "--workers", "2", *extra, log=log, env=env) as served:
        url, proc, _ = served
        until(lambda: len(statuses(url, want=2)) == 2, "both workers up", log)
        yield url, proc.pid


def set_server(root: Path, old: str, new: str) -> None:
    fim_yaml = root / "fim.yaml"
    fim_yaml.write_text(fim_yaml.read_text().replace(old, new))


def test_a_worker_started_after_a_rejected_reload_never_serves_without_keys(
    tmp_path: Path, pg_database: Any
) -> None:
    root = project(tmp_path / "p", pg_database("").owner_url)
    log = tmp_path / "serve.log"
    with serving(root, log, "--host", "0.0.0.0") as (url, supervisor):
        set_server(root, KEYED, KEYLESS)  # every worker rejects it: still keyed
        rejected = until(
            lambda: (
                (s := statuses(url, want=2))  # its 40 connections may all reach one worker
                and len(s) == 2
                and all(w["last_reload_error"] for w in s.values())
                and s
            ),
            "both workers rejected the reload",
            log,
        )
        assert httpx.get(f"{url}/v1/agents").status_code == 401

        gone, kept = sorted(rejected)
        os.kill(gone, signal.SIGKILL)  # a crash, the OOM killer: uvicorn starts another
        until(  # refused, or (the attack) serving without keys
            lambda: lines(log, "refused the project on disk") or len(statuses(url, want=2)) == 2,
            "a worker started again",
            log,
        )
        for _ in range(10):  # fresh connections: whichever worker takes them
            assert httpx.get(f"{url}/v1/agents").status_code == 401
        assert statuses(url).keys() == {kept}  # the other worker keeps serving, as it was
        assert statuses(url)[kept]["snapshot"] == rejected[kept]["snapshot"]

        os.kill(supervisor, signal.SIGHUP)  # restart all: the first replacement refuses
        until(lambda: lines(log, "aborting the restart"), "SIGHUP's restart aborted", log)
        assert [httpx.get(f"{url}/v1/agents").status_code for _ in range(10)] == [401] * 10
        assert statuses(url).keys() == {kept}

        set_server(root, KEYLESS, KEYED)  # fixed: the held worker is started again
        until(lambda: len(statuses(url, want=2)) == 2, "the replaced worker back", log)
    text = log.read_text()
    assert "Traceback" not in text
    refused = [line for line in text.splitlines() if "refused the project on disk" in line]
    assert refused[0].startswith("ERROR fim.server: fim serve worker [")
    assert "fim.yaml:4:3: server.api_keys: " in refused[0]


def test_a_worker_started_after_a_rejected_python_edit_checks_it_in_a_child(
    tmp_path: Path, pg_database: Any
) -> None:
    root = project(tmp_path / "p", pg_database("").owner_url)
    log = tmp_path / "serve.log"
    with serving(root, log) as (url, supervisor):
        before = statuses(url)
        (root / "hooks" / "calc.py").write_text(MARKER + "raise RuntimeError('boom')\n" + TOOL)
        until(
            lambda: (
                len(s := statuses(url, want=2)) == 2
                and all(w["last_reload_error"] for w in s.values())
            ),
            "both workers rejected the edit",
            log,
        )
        os.kill(supervisor, signal.SIGHUP)
        until(lambda: lines(log, "aborting the restart"), "SIGHUP's restart aborted", log)
        after = statuses(url)
        assert after.keys() == before.keys()  # the same two workers, on their snapshot
        assert {w["snapshot"] for w in after.values()} == {w["snapshot"] for w in before.values()}
    ran = (root / "ran.txt").read_text().split()
    assert ran and set(ran) == {"1"}  # the module ran in `python -I` children only
    assert "RuntimeError: boom" in log.read_text()


# ------------------------------------------------------------------ a worker's start, here


@pytest.fixture
def keyless(tmp_path: Path) -> Path:
    root = project(tmp_path / "p", "sqlite:///.fim/state.db", server="api_keys: []")
    return root


def test_a_start_the_gate_refuses_exits_with_one_line(
    keyless: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = {"host": "10.9.9.9", "port": 8000, "accepted": ""}
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as ended:
        workers.start_snapshot(keyless, options)
    assert ended.value.code == workers.REFUSED != 3  # 3: uvicorn would stop every worker
    (record,) = caplog.records
    assert "refused the project on disk" in record.getMessage()
    assert "server.api_keys: " in record.getMessage()


def test_the_project_the_parent_compiled_needs_no_child_and_another_does(
    keyless: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    children: list[str] = []
    monkeypatch.setattr(workers, "vet_in_child", lambda s: children.append(s.version) or [])
    accepted = fingerprint(compile_project(keyless))
    options = {"host": "127.0.0.1", "port": 8000, "accepted": accepted}
    workers.start_snapshot(keyless, options)
    (keyless / "hooks" / "calc.py").write_text(TOOL + "\nTWO = 2\n")
    started = workers.start_snapshot(keyless, options)  # what no one checked yet
    assert children == [started.version]


# ------------------------------------------------------------------ the supervisor's wait


class Worker:
    def __init__(self, pid: int) -> None:
        self.pid, self.exitcode = pid, None


class Base:
    """uvicorn's `Multiprocess` as far as the supervisor uses it: a dead worker is
    replaced in place by a new one."""

    def __init__(self) -> None:
        self.processes = [Worker(1), Worker(2)]
        self.started = 2

    def keep_subprocess_alive(self) -> None:
        for i, worker in enumerate(self.processes):
            if worker.exitcode is not None:
                self.started += 1
                self.processes[i] = Worker(self.started)


def test_a_refused_worker_is_started_again_after_a_growing_wait() -> None:
    now = [0.0]
    supervised = workers.supervisor(Base, None, clock=lambda: now[0])()

    def refuse(slot: int) -> int:
        supervised.processes[slot].exitcode = workers.REFUSED
        return int(supervised.processes[slot].pid)

    def pids() -> list[int]:
        return [p.pid for p in supervised.processes]

    first = refuse(0)
    supervised.keep_subprocess_alive()
    assert pids() == [first, 2]  # held: 1 s
    now[0] = 1.0
    supervised.keep_subprocess_alive()
    assert pids() == [3, 2]
    refuse(0)
    supervised.processes[1].exitcode = -9  # killed: replaced at once, as uvicorn does
    supervised.keep_subprocess_alive()
    assert pids() == [3, 4]  # the second refusal in a row waits 2 s
    now[0] = 2.9
    supervised.keep_subprocess_alive()
    assert pids() == [3, 4]
    now[0] = 3.0
    supervised.keep_subprocess_alive()
    assert pids() == [5, 4]
    now[0] = 1000.0  # long after: a refusal waits 1 s again
    refuse(0)
    supervised.keep_subprocess_alive()
    now[0] = 1001.0
    supervised.keep_subprocess_alive()
    assert pids() == [6, 4]
