"""A `fim worker` whose store stops answering: a brief outage is ridden out (the worker
reconnects with backoff, one log line an attempt, no traceback, and runs the next job), and
a store that stays away past `--store-retry-timeout` ends the worker with exit code 1 and
one line naming the store, password masked, so a supervisor that restarts only on failure
(systemd `Restart=on-failure`, docker `on-failure`) starts it again. It used to exit 0.

The store is a real PostgreSQL database reached through a TCP proxy in this test, which
refuses connections while it is down (the shared server is never stopped). The process
tests wait on a worker's start-up and on the outage; their CPU is the worker's imports."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim.errors import RunError
from fim.testing.cluster import until
from fim.testing.server import fim_process
from fim.workflows.worker_store import Outage, reconnect, ride_out

WORKFLOW = """\
description: One node, no model
nodes:
  sum: {type: tool, tool: calculator, args: {expression: "6*7"}}
outputs:
  answer: "{{ nodes.sum.output }}"
"""


class Proxy:
    """A loopback TCP proxy to PostgreSQL that refuses every connection while `down`."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.loop = asyncio.new_event_loop()
        self.pipes: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.up()

    def _call(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(10)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.pipes |= {writer, upstream}
        await asyncio.gather(self._pipe(reader, upstream), self._pipe(upstream_reader, writer))
        self.pipes -= {writer, upstream}

    async def _up(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _down(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.pipes):  # the connections already made die too
            writer.transport.abort()
        self.pipes.clear()
        await self.server.wait_closed()

    def up(self) -> None:
        self._call(self._up())

    def down(self) -> None:
        self._call(self._down())

    def close(self) -> None:
        if self.server is not None and self.server.is_serving():
            self.down()
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def proxied(pg_database: Any) -> Iterator[tuple[Any, Proxy]]:
    """A fresh database and a proxy to its server."""
    from sqlalchemy.engine import make_url

    db = pg_database("")
    proxy = Proxy(make_url(db.owner_url).port or 5432)
    try:
        yield db, proxy
    finally:
        proxy.close()


def _project(tmp_path: Path, db: Any, proxy: Proxy, password: str = "") -> Path:
    """A project whose store is `db` through `proxy` (with `password` in its URL: the
    server trusts the role, so libpq never sends it, and no line may show it)."""
    from sqlalchemy.engine import make_url

    url = make_url(db.owner_url).set(port=proxy.port, password=password or None)
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    state = url.render_as_string(hide_password=False)
    (root / "fim.yaml").write_text(f'name: outage\nstate: "{state}"\n')
    (root / "workflows" / "answer.yaml").write_text(WORKFLOW)
    return root


def _worker(root: Path, log: Path, *extra: str) -> Any:
    args = ["worker", "-p", str(root), "--no-reload", "--concurrency", "1"]
    args += ["--heartbeat", "0.25", "--stalled-after", "2", "--shutdown-timeout", "1", *extra]
    return fim_process(*args, log=log)


async def _queue(db: Any, run_id: str) -> None:
    from fim.workflows.durable import defer_workflow, make_app

    app = make_app(db.owner_url)  # straight to the server, not through the proxy
    async with app.open_async():
        await defer_workflow(app, run_id, "answer", {})


async def _status(db: Any, root: Path, run_id: str) -> str | None:
    from fim.run.services import Services
    from fim.store import get_store

    store = get_store(Services(root=root, state_url=db.owner_url))
    record = await store.get_run(run_id)
    return None if record is None else record.status


def test_a_brief_outage_is_ridden_out_and_the_next_job_runs(
    tmp_path: Path, proxied: tuple[Any, Proxy]
) -> None:
    db, proxy = proxied
    root = _project(tmp_path, db, proxy)
    log = tmp_path / "worker.log"
    with _worker(root, log) as proc:
        until(lambda: "Starting worker" in log.read_text(), what="the worker's start")
        proxy.down()
        until(lambda: "attempt 2 refused" in log.read_text(), what="two refused attempts")
        proxy.up()
        until(lambda: "answers again" in log.read_text(), what="the reconnection")
        assert proc.poll() is None  # it used to stop here, with exit code 0

        asyncio.run(_queue(db, "outage01"))
        assert until(lambda: asyncio.run(_status(db, root, "outage01")) == "ok", timeout=30)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # a stop asked for is still a clean exit
    text = log.read_text()
    assert "Traceback" not in text
    assert text.count("refused the worker") == 1  # the outage: one line, then one per attempt
    assert "reconnects for up to 120 s (--store-retry-timeout)" in text


def test_a_store_that_stays_away_ends_the_worker_with_exit_1_naming_it(
    tmp_path: Path, proxied: tuple[Any, Proxy]
) -> None:
    db, proxy = proxied
    root = _project(tmp_path, db, proxy, password="hunter2")
    log = tmp_path / "worker.log"
    with _worker(root, log, "--store-retry-timeout", "1.5") as proc:
        until(lambda: "Starting worker" in log.read_text(), what="the worker's start")
        proxy.down()
        assert proc.wait(timeout=60) == 1
    text = log.read_text()
    last = text.strip().splitlines()[-1]
    assert last.startswith("error: state store postgresql")
    assert f":***@127.0.0.1:{proxy.port}/{db.name} refused the worker for" in last
    assert "(--store-retry-timeout 1.5)" in last
    assert "hunter2" not in text
    assert "Traceback" not in text


# ------------------------------------------------------------------ the policy, in process


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.naps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.now += seconds


def _refusal() -> Exception:
    import psycopg

    return psycopg.OperationalError("connection failed: Connection refused")


def test_the_store_is_probed_with_backoff_one_line_an_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outage = Outage("postgresql://u:***@db/fim", 60.0, clock=clock)
    assert outage.refused(_refusal())  # the first refusal: the outage begins
    answers = [_refusal(), _refusal(), _refusal(), None]

    async def probe() -> None:
        if (problem := answers.pop(0)) is not None:
            raise problem

    with caplog.at_level(logging.INFO, logger="fim.worker"):
        asyncio.run(reconnect(outage, probe, asyncio.Event(), sleep=clock.sleep))

    assert outage.since is None  # over
    assert len(clock.naps) == 3 and clock.naps == sorted(clock.naps)  # growing waits
    refused = [r for r in caplog.records if "refused (" in r.getMessage()]
    assert [r.getMessage().split(" refused")[0] for r in refused] == [
        f"store postgresql://u:***@db/fim: attempt {n}" for n in (1, 2, 3)
    ]
    assert all(r.exc_info is None for r in caplog.records)  # lines, no traceback
    assert "answers again" in caplog.records[-1].getMessage()


def test_past_the_bound_the_worker_gives_up_in_one_line() -> None:
    clock = Clock()
    outage = Outage("postgresql://u:***@db/fim", 5.0, clock=clock)
    outage.refused(_refusal())

    async def probe() -> None:
        raise _refusal()

    with pytest.raises(RunError) as caught:
        asyncio.run(reconnect(outage, probe, asyncio.Event(), sleep=clock.sleep))
    assert clock.now == 5.0  # the last wait is cut to the bound: no probe after it
    assert caught.value.message == (
        "state store postgresql://u:***@db/fim refused the worker for 5 s "
        "(--store-retry-timeout 5): Connection refused"
    )


def test_a_failure_that_is_not_the_store_is_not_ridden_out() -> None:
    outage = Outage("postgresql://db/fim", 60.0)
    assert not outage.refused(ValueError("a bug"))
    assert outage.since is None


def test_a_worker_that_stops_by_itself_exits_as_a_failure() -> None:
    """procrastinate stops its worker when a side task fails; with no signal and no outage
    behind it, exit 0 would leave a supervisor that restarts on failure with no worker."""

    async def session() -> None:
        return None

    async def probe() -> None:
        return None

    with pytest.raises(RunError, match="stopped by itself"):
        asyncio.run(ride_out(session, Outage("postgresql://db/fim", 60.0), probe))


def test_after_an_outage_the_worker_starts_again_and_a_signal_stops_it() -> None:
    clock = Clock()
    outage = Outage("postgresql://db/fim", 60.0, clock=clock)
    sessions: list[str] = []

    async def session() -> None:
        sessions.append("started")
        if len(sessions) == 1:
            raise _refusal()  # procrastinate's start (its first queries) refused
        os.kill(os.getpid(), signal.SIGTERM)  # handled by `ride_out` while it runs
        await asyncio.Event().wait()

    async def probe() -> None:
        return None

    asyncio.run(ride_out(session, outage, probe, sleep=clock.sleep))
    assert sessions == ["started", "started"]
    assert outage.since is None


def test_the_bound_is_a_number_of_seconds_up_to_a_day() -> None:
    from fim.commands.worker import check_stalled

    check_stalled(30.0, 10.0, 60.0, 0.0)  # 0: exit at the first refusal the store keeps up
    for wrong in (float("nan"), float("inf"), -1.0, 86401.0):
        with pytest.raises(RunError, match="--store-retry-timeout"):
            check_stalled(30.0, 10.0, 60.0, wrong)
