"""One run never runs on two `fim worker`s at once, whatever stops the first (attack-47 F1).

procrastinate stops a worker by cancelling its side tasks, the heartbeat among them, and
only then gives the running jobs `--shutdown-timeout` to end. Another worker's
stalled-job retry hands a job on once its worker is silent for `--stalled-after`: a job
given a longer grace ran on both workers at once, its tool's side effect twice (a card
charged twice), after a SIGTERM as after a store outage. Now the worker keeps beating
while its jobs end (`fim.workflows.worker_watch.Lease`), and a job whose worker can no
longer beat is cut, and delivered again, before another worker may take it.

The processes record each start and end of the tool's side effect in one file, in the
order they happen; no start may come while another run of it is still going. Each test
waits on a worker's start and on `--stalled-after` passing; their CPU is the workers'
imports."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fim.testing.cluster import until
from fim.testing.server import fim_process

WORKFLOW = """\
description: A side effect that takes long on the first worker to run it
nodes:
  charge: {type: tool, tool: datetime}
outputs:
  done: "{{ nodes.charge.output }}"
"""

TOOLS = """\
import asyncio, os
from pathlib import Path

from fim.tools.base import FunctionTool

LOG = Path(os.environ["FIM_TEST_SIDE_EFFECTS"])


def note(what: str) -> None:
    with LOG.open("a") as f:
        f.write(f"{what} {os.getpid()}\\n")


def tools():
    async def charge() -> str:
        note("start")
        try:
            holder = LOG.with_suffix(".holder")
            if not holder.exists():  # the first run waits until the test releases it
                holder.write_text(str(os.getpid()))
                while not LOG.with_suffix(".release").exists():
                    await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            note("cut")
            raise
        note("end")
        return "charged"

    return [FunctionTool("datetime", "charge once", {"type": "object"}, charge,
                         category="testing")]
"""

BEAT = ("--heartbeat", "0.5", "--stalled-after", "3")
"""Short bounds (the defaults are 10 and 30 s); 6 missed beats before a worker is stalled."""


def overlaps(effects: Path) -> list[str]:
    """The starts that came while another run of the side effect was still going."""
    going: set[str] = set()
    found = []
    for line in effects.read_text().splitlines():
        what, pid = line.split()
        if what == "start":
            if going:
                found.append(f"{pid} started while {sorted(going)} still ran")
            going.add(pid)
        else:
            going.discard(pid)
    return found


def _project(tmp_path: Path, state: str) -> tuple[Path, dict[str, str], Path]:
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: once\nstate: "{state}"\n')
    (root / "workflows" / "charge.yaml").write_text(WORKFLOW)
    (tmp_path / "sidetools.py").write_text(TOOLS)
    effects = tmp_path / "effects.log"
    env = {
        **os.environ,
        "FIM_TEST_SIDE_EFFECTS": str(effects),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    return root, env, effects


async def _queue(url: str, run_id: str) -> None:
    from fim.workflows.durable import defer_workflow, ensure_schema, make_app

    app = make_app(url)
    async with app.open_async():
        await ensure_schema(app)
        await defer_workflow(app, run_id, "charge", {})


async def _status(url: str, root: Path, run_id: str) -> str | None:
    from fim.run.services import Services
    from fim.store import get_store

    record = await get_store(Services(root=root, state_url=url)).get_run(run_id)
    return None if record is None else record.status


def _db_seconds(url: str) -> float:
    """The database's clock (the one the stalled-job retry reads), in seconds."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
    assert row is not None
    return float(row[0])


def _worker(root: Path, log: Path, env: dict[str, str], *extra: str) -> Any:
    args = ["worker", "-p", str(root), "--no-reload", "--tools", "sidetools:tools"]
    return fim_process(*args, "--concurrency", "1", *BEAT, *extra, log=log, env=env)


def test_a_sigterm_grace_longer_than_stalled_after_keeps_the_job_on_its_worker(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root, env, effects = _project(tmp_path, db.owner_url)
    asyncio.run(_queue(db.owner_url, "once01"))
    holder = effects.with_suffix(".holder")
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(
            _worker(root, tmp_path / "w1.log", env, "--shutdown-timeout", "60")
        )
        until(holder.exists, what="the first worker's side effect")
        stack.enter_context(_worker(root, tmp_path / "w2.log", env))
        until(lambda: "Starting worker" in (tmp_path / "w2.log").read_text(), what="w2")

        stopped = _db_seconds(db.owner_url)
        first.send_signal(signal.SIGTERM)
        # past the stalled bound, the retry's next pass and the other worker's next poll
        # (5 s): a silent worker's job would have been handed on and started again by now
        until(
            lambda: overlaps(effects) or _db_seconds(db.owner_url) > stopped + 3 + 1 + 5,
            timeout=60,
            what="the stalled bound to pass",
        )
        effects.with_suffix(".release").touch()  # the first run ends, inside its grace
        assert first.wait(timeout=30) == 0
        assert until(lambda: asyncio.run(_status(db.owner_url, root, "once01")) == "ok")

    assert overlaps(effects) == []
    assert effects.read_text().split() == ["start", str(first.pid), "end", str(first.pid)]
    assert "Traceback" not in (tmp_path / "w1.log").read_text()


def test_a_worker_that_loses_its_store_cuts_its_job_before_another_takes_it(
    tmp_path: Path, pg_database: Any
) -> None:
    from sqlalchemy.engine import make_url

    from tests.workflows.test_worker_store_outage import Proxy

    db = pg_database("")
    proxy = Proxy(make_url(db.owner_url).port or 5432)
    via = make_url(db.owner_url).set(port=proxy.port).render_as_string(hide_password=False)
    root, env, effects = _project(tmp_path, "${FIM_STATE_URL}")
    asyncio.run(_queue(db.owner_url, "once02"))
    holder = effects.with_suffix(".holder")
    try:
        with contextlib.ExitStack() as stack:
            w1 = {**env, "FIM_STATE_URL": via}
            first = stack.enter_context(
                _worker(root, tmp_path / "w1.log", w1, "--shutdown-timeout", "60")
            )
            until(holder.exists, what="the first worker's side effect")
            second = {**env, "FIM_STATE_URL": db.owner_url}
            stack.enter_context(_worker(root, tmp_path / "w2.log", second))
            until(lambda: "Starting worker" in (tmp_path / "w2.log").read_text(), what="w2")

            proxy.down()  # the first worker's store is gone: no beat reaches it
            assert until(
                lambda: asyncio.run(_status(db.owner_url, root, "once02")) == "ok", timeout=60
            )
            assert first.poll() is None  # still riding the outage out
    finally:
        proxy.close()

    assert overlaps(effects) == []
    lines = effects.read_text().splitlines()
    assert lines[:2] == [f"start {first.pid}", f"cut {first.pid}"]
    assert [line.split()[0] for line in lines[2:]] == ["start", "end"]
    log = (tmp_path / "w1.log").read_text()
    assert "Traceback" not in log
    assert "delivered again before another worker may take" in log


def test_overlaps_reads_the_recorded_sequence(tmp_path: Path) -> None:
    effects = tmp_path / "e.log"
    effects.write_text("start 1\ncut 1\nstart 2\nend 2\n")
    assert overlaps(effects) == []
    effects.write_text("start 1\nstart 2\nend 2\nend 1\n")
    assert overlaps(effects) == ["2 started while ['1'] still ran"]


# ------------------------------------------------------------------ the lease, in process


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Manager:
    """procrastinate's job manager, as far as the lease uses it: a store that is up or not."""

    def __init__(self) -> None:
        self.up = True
        self.beats: list[int] = []

    async def register_worker(self) -> int:
        return 7

    async def update_heartbeat(self, worker_id: int) -> None:
        if not self.up:
            raise OSError("connection refused")
        self.beats.append(worker_id)

    async def unregister_worker(self, worker_id: int) -> None:
        return None


@pytest.fixture
def loggers() -> Any:
    """`guard` filters process-wide loggers: put them back as they were."""
    import logging

    names = ("psycopg", "psycopg.pool", "fim.store", "fim.usage")
    before = {name: list(logging.getLogger(name).filters) for name in names}
    yield
    for name, filters in before.items():
        logging.getLogger(name).filters[:] = filters


def _context() -> Any:
    return SimpleNamespace(
        job=SimpleNamespace(task_name="fim.advance_workflow", id=1, task_kwargs={"run_id": "r"}),
        additional_context={},
        abort_reason=lambda: None,
    )


def test_the_lease_beats_through_a_stop_and_cuts_the_jobs_only_once_no_beat_lands() -> None:
    """heartbeat 1, stalled-after 3: it beats when procrastinate's beat is 1.5 s late (a
    stopping worker has none), and cuts at 2 s without a beat that reached the store, a
    third of the bound before another worker may take the job; each job once."""
    from fim.workflows.queue_rows import worker_stopping
    from fim.workflows.worker_watch import Lease

    clock, manager = Clock(), Manager()
    lease = Lease(heartbeat=1.0, stalled_after=3.0, clock=clock)
    lease.track(SimpleNamespace(job_manager=manager))  # type: ignore[arg-type]
    lost: list[str] = []
    lease.on_lost = lost.append
    context = _context()
    timeline: list[str] = []

    async def job() -> None:
        with lease.hold(context):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                timeline.append(f"cut at {clock.now:g}")
                raise

    async def at(now: float) -> None:
        clock.now = now
        await lease.check()
        await asyncio.sleep(0)  # the cut job runs its handler

    async def scenario() -> None:
        await manager.register_worker()  # procrastinate's start: the first beat, at 0
        assert lease.worker_id == 7
        running = asyncio.create_task(job())
        await asyncio.sleep(0)
        await at(1.0)  # procrastinate's own beat is not late yet
        await at(1.5)  # late (the worker stopped): the lease beats itself
        manager.up = False  # the store goes away
        await at(3.0)
        await at(3.4)  # 1.9 s without a beat that landed: not yet
        await at(3.5)  # 2 s: cut, handed back before 4.5, when another may take it
        await at(4.0)
        with contextlib.suppress(asyncio.CancelledError):
            await running
        assert lease.jobs == {}

    asyncio.run(scenario())
    assert manager.beats == [7]
    assert timeline == ["cut at 3.5"]
    assert worker_stopping(context)  # delivered again, not a user's cancel
    assert lost == ["no heartbeat reached the store for 2.0 s"]


def test_a_hung_store_cannot_delay_the_cut_past_its_line() -> None:
    """A beat that never answers (a store that hangs rather than refuses) is given only the
    time left before the cut line, none at the line itself, and the keeper wakes at the
    line: the cut came up to a tick and a beat's wait late (24 s for a 20 s line)."""
    from fim.workflows.worker_watch import Lease

    clock, attempts = Clock(), []

    class Hung(Manager):
        async def update_heartbeat(self, worker_id: int) -> None:
            attempts.append(clock.now)
            await asyncio.Event().wait()

    hung = Lease(heartbeat=1.0, stalled_after=3.0, clock=clock)
    hung.track(SimpleNamespace(job_manager=Hung()))  # type: ignore[arg-type]

    async def at_the_line() -> None:
        await hung._manager.register_worker()
        clock.now = 1.99  # a beat may take the 0.01 s left, no more
        await hung.check()
        clock.now = 2.0  # at the line: no beat tried, the cut is now
        await hung.check()

    asyncio.run(at_the_line())
    assert attempts == [1.99]

    clock.now, cuts, naps = 0.0, [], []  # stalled-after 3.3: the line, 2.2, is no tick
    lease = Lease(heartbeat=1.0, stalled_after=3.3, clock=clock)
    refusing = Manager()
    refusing.up = False
    lease.track(SimpleNamespace(job_manager=refusing))  # type: ignore[arg-type]
    lease.on_lost = lambda reason: cuts.append(clock.now)

    async def nap(seconds: float) -> None:
        if cuts:
            raise asyncio.CancelledError  # the session ends
        naps.append(seconds)
        clock.now += seconds

    async def keeper() -> None:
        await lease._manager.register_worker()
        lease.jobs[asyncio.create_task(asyncio.Event().wait())] = _context()
        with contextlib.suppress(asyncio.CancelledError):
            await lease.keep(sleep=nap)

    asyncio.run(keeper())
    assert cuts == [pytest.approx(2.2)]  # not 2.25, the next quarter heartbeat
    assert naps[:8] == [0.25] * 8 and naps[8] == pytest.approx(0.2)


def test_a_stopping_job_whose_last_writes_fail_is_still_delivered_again() -> None:
    """Cut during an outage, a job's cleanup writes are refused: ended `failed`, its run
    would stay `running` for good; its traceback is no error either."""
    import logging

    from fim.workflows.queue_rows import CUT, DeliverAgain
    from fim.workflows.worker_watch import JobFields, JobWatch

    watch = JobWatch(None)

    async def refused() -> str:
        raise OSError("connection refused")

    stopping, cancelled = _context(), _context()
    stopping.additional_context[CUT] = True
    with pytest.raises(DeliverAgain) as again:
        asyncio.run(watch(refused, stopping, None))
    with pytest.raises(OSError):  # a job not stopping fails as it did
        asyncio.run(watch(refused, cancelled, None))

    record = logging.LogRecord("procrastinate.worker", logging.INFO, "", 0, "Job ended", (),
                               (DeliverAgain, again.value, again.value.__traceback__))  # fmt: skip
    JobFields().filter(record)
    assert record.exc_info is None


def test_a_jobs_end_refused_because_another_worker_took_it_is_one_line(
    caplog: pytest.LogCaptureFixture, loggers: None
) -> None:
    """procrastinate raised it from a job's finishing task, which nobody awaits: "Task
    exception was never retrieved" and a traceback."""
    from procrastinate.exceptions import ConnectorException

    from fim.workflows.worker_store import Outage, guard

    class Jobs:
        async def finish_job(self, job: Any, status: Any, delete_job: bool) -> None:
            raise ConnectorException() from RuntimeError(
                'Job was not found or not in "doing" or "todo" status (job id: 5)'
            )

        async def listen_for_jobs(self, **kwargs: Any) -> None:
            return None

    manager = Jobs()
    for name in ("fetch_job", "update_heartbeat", "list_jobs_to_abort_async",
                 "defer_periodic_job", "retry_job", "unregister_worker"):  # fmt: skip
        setattr(manager, name, manager.listen_for_jobs)
    guard(SimpleNamespace(job_manager=manager), Outage("postgresql://db/x", 60.0))  # type: ignore[arg-type]
    job = SimpleNamespace(id=5)
    asyncio.run(manager.finish_job(job=job, status="failed", delete_job=False))
    assert [r.getMessage() for r in caplog.records] == [
        "job 5 was handed on meanwhile: left as it is"
    ]


def test_a_cut_jobs_refused_writes_are_one_line_each_during_the_outage(
    caplog: pytest.LogCaptureFixture, loggers: None
) -> None:
    """A cut agent run still tries to record its usage: refused, that was a traceback."""
    import logging

    from fim.workflows.worker_store import Outage, guard
    from tests.workflows.test_worker_store_outage import _refusal

    manager = SimpleNamespace(listen_for_jobs=None)
    for name in ("fetch_job", "update_heartbeat", "list_jobs_to_abort_async",
                 "defer_periodic_job", "finish_job", "retry_job", "unregister_worker"):  # fmt: skip
        setattr(manager, name, None)
    outage = Outage("postgresql://db/x", 60.0)
    guard(SimpleNamespace(job_manager=manager), outage)  # type: ignore[arg-type]
    store = logging.getLogger("fim.store")

    def refused_write() -> logging.LogRecord:
        try:
            raise _refusal()
        except Exception:
            store.exception("could not store %s", "the usage of run r1")
        return caplog.records[-1]

    assert refused_write().exc_info is not None  # no outage: a store failure, in full
    outage.refused(_refusal())
    line = refused_write()
    assert line.exc_info is None
    assert line.getMessage() == "could not store the usage of run r1 (Connection refused)"


def test_a_loop_call_in_flight_when_the_outage_is_noted_is_bounded_too(
    monkeypatch: pytest.MonkeyPatch, loggers: None
) -> None:
    """A `fetch_job` that began just before the outage waited 30 s on the pool: the stop
    (and with it the ride-out's reconnecting) waited as long."""
    from fim.workflows import worker_store
    from tests.workflows.test_worker_store_outage import _refusal

    monkeypatch.setattr(worker_store, "STOPPING_CALL_TIMEOUT", 0.01)

    async def waits(**kwargs: Any) -> Any:
        await asyncio.Event().wait()  # a pool with no connection to give

    manager = SimpleNamespace(listen_for_jobs=waits)
    for name in ("fetch_job", "update_heartbeat", "list_jobs_to_abort_async",
                 "defer_periodic_job", "finish_job", "retry_job", "unregister_worker"):  # fmt: skip
        setattr(manager, name, waits)
    outage = worker_store.Outage("postgresql://db/x", 60.0)
    worker_store.guard(SimpleNamespace(job_manager=manager), outage)  # type: ignore[arg-type]

    async def scenario() -> Any:
        fetching = asyncio.create_task(manager.fetch_job(queues=["q"], worker_id=1))
        await asyncio.sleep(0)
        outage.refused(_refusal())
        return await asyncio.wait_for(fetching, 10)  # the fallback: no job

    assert asyncio.run(scenario()) is None


def test_a_signal_during_an_outages_stop_lets_the_stop_finish() -> None:
    """The outage stops the worker (a cancel: procrastinate's graceful stop); a SIGTERM
    then cancelled it again, which cut the jobs' grace and the stop's own last writes."""
    from fim.workflows.worker_store import Outage, ride_out
    from tests.workflows.test_worker_store_outage import _refusal

    outage = Outage("postgresql://db/x", 60.0)
    stops: list[str] = []

    async def session() -> None:
        asyncio.get_running_loop().call_soon(outage.refused, _refusal())
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stops.append("stopping")
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.05)  # the graceful stop's work: not cancelled again
            stops.append("stopped")
            raise

    async def probe() -> None:
        return None

    asyncio.run(ride_out(session, outage, probe))
    assert stops == ["stopping", "stopped"]
