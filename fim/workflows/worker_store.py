"""`fim worker` through an outage of its store: ridden out, then a clear exit.

procrastinate stops its worker when a side task fails (the LISTEN connection, the
heartbeat, the periodic deferrer) and lets the loop's own failed queries raise: a few
seconds of PostgreSQL refusing connections ended `fim worker` with exit code 0 after a
page of tracebacks, and a supervisor restarting only on failure left no worker.

Here a store failure (`fim.store.health.store_failure`: refused, unreachable, shut down)
in the worker's own queue calls is noted once (`Outage.refused`, one log line) and stops
the worker as SIGTERM does: it takes no new job, the jobs running get `--shutdown-timeout`
to end and the others go back to the queue (`DeliverAgain`); a job is cut sooner once no
heartbeat has reached the store for 2/3 of `--stalled-after` (`worker_watch.Lease`). The
worker then probes the store with backoff, one log line per attempt, and starts again once
it answers; after `--store-retry-timeout` seconds of refusal it exits 1 with one line
naming the store (password masked), for its supervisor to restart.

It starts again as a new procrastinate worker, not in place: what the old one could not
write back during the outage (a job's end, its abort) is left `doing` under the old
worker's id, and only a worker whose heartbeat stopped has its jobs handed on by the
stalled-job retry (`fim.workflows.queue_rows.retry_stalled_jobs`), as for a worker that
died. Staying in place would keep such a job `doing` for as long as the worker lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.retries import Backoff
from fim.store.health import store_failure

if TYPE_CHECKING:
    import procrastinate

log = logging.getLogger("fim.worker")

BACKOFF = Backoff(attempts=0, first=0.5, factor=2.0, jitter=0.25, cap=10.0)
"""Waits between two probes of a refusing store (`attempts` unused: the bound is time)."""

PROBE_TIMEOUT = 5
"""Seconds a probe waits for a connection (libpq's `connect_timeout`, at least 2)."""

STOPPING_CALL_TIMEOUT = 2.0
"""Seconds each of the stopping worker's last queue calls (a job's end, its unregistering)
may take once the store refused it; without a bound each waited for the pool's 30 s."""

SIGNALS = (signal.SIGTERM, signal.SIGINT)

HANDED_ON = "Job was not found or "
"""procrastinate's refusal to end a job no longer `doing` (another worker took it over)."""

_GUARDED: dict[str, Callable[[], Any]] = {
    "fetch_job": lambda: None,  # no job: the loop waits, and the stop ends it
    "update_heartbeat": lambda: None,
    "list_jobs_to_abort_async": tuple,
    "defer_periodic_job": lambda: None,
    "finish_job": lambda: None,  # left `doing` under this worker: handed on once it stopped
    "retry_job": lambda: None,
    "unregister_worker": lambda: None,  # its row goes stale: pruned by the next start
}
"""The job manager's calls the worker's own loop makes, and what each gives back when the
store refused it (the outage noted: the worker stops, with no traceback in the log)."""


class Outage:
    """Whether, since when and why the store refuses this worker; `bound` seconds of it
    are ridden out. `on_refused` stops the running worker (`ride_out` sets it)."""

    def __init__(self, url: str, bound: float, clock: Callable[[], float] = time.monotonic):
        self.url = url  # masked (`Database.display_url`)
        self.bound = bound
        self.clock = clock
        self.since: float | None = None
        self.reason = ""
        self.on_refused: Callable[[], None] | None = None
        self.bounds: set[asyncio.Timeout] = set()
        """The worker loop's calls in flight (`_guarded`): one that began before the outage
        was noted (a `fetch_job` waiting 30 s on the pool) kept the stop from ending."""

    def refused(self, exc: BaseException) -> bool:
        """Note `exc` when it is the store failing (the first one of an outage is logged
        and stops the worker); False for anything else, which the caller raises."""
        line = store_failure(exc)
        if line is None:
            return False
        self.noted(line)
        return True

    def noted(self, line: str) -> None:
        """Note the store failing for `line`'s reason (also: no heartbeat reaches it)."""
        self.reason = line
        if self.since is None:
            self.since = self.clock()
            for bound in self.bounds:
                bound.reschedule(asyncio.get_running_loop().time() + STOPPING_CALL_TIMEOUT)
            log.warning(
                "store %s refused the worker (%s): it takes no new job and reconnects "
                "for up to %g s (--store-retry-timeout)",
                self.url,
                line,
                self.bound,
            )
            if self.on_refused is not None:
                self.on_refused()

    def elapsed(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since

    def gone(self) -> RunError:
        """The one line `fim worker` exits with when the bound has passed."""
        return RunError(
            f"state store {self.url} refused the worker for {self.elapsed():.0f} s "
            f"(--store-retry-timeout {self.bound:g}): {self.reason}",
            hint="the worker exits for its supervisor to restart it; a longer "
            "--store-retry-timeout rides out longer outages",
        )


def guard(app: procrastinate.App, outage: Outage) -> None:
    """Route the store failures of the worker loop's own calls (`_GUARDED`, and the LISTEN
    of new jobs) to `outage`, on this app's job manager only: procrastinate would log each
    with a traceback and stop the worker as if it had been asked to."""
    manager = app.job_manager
    for name, fallback in _GUARDED.items():
        setattr(manager, name, _guarded(getattr(manager, name), outage, fallback, name))
    listen = manager.listen_for_jobs

    async def listening(**kwargs: Any) -> None:
        try:
            await listen(**kwargs)
        except Exception as exc:
            if not outage.refused(exc):
                raise
            await asyncio.Event().wait()  # the stopping worker cancels its side tasks

    setattr(manager, "listen_for_jobs", listening)  # noqa: B010 - an instance's method
    quiet = _QuietPsycopg(outage)
    for name in ("psycopg", "psycopg.pool"):  # a logger's filters see its own records only
        logging.getLogger(name).addFilter(quiet)
    for name in ("fim.store", "fim.usage"):  # a stopping job's last writes, refused
        logging.getLogger(name).addFilter(_OneLine(outage))


def _guarded(
    call: Callable[..., Awaitable[Any]], outage: Outage, fallback: Callable[[], Any], name: str
) -> Callable[..., Awaitable[Any]]:
    """`call`, its store failures noted and answered with `fallback()`; once the outage is
    noted, bounded by `STOPPING_CALL_TIMEOUT`. A job's end refused because its row is no
    longer this worker's (`HANDED_ON`) is one line, not an asyncio "Task exception was
    never retrieved" traceback."""

    async def guarded(*args: Any, **kwargs: Any) -> Any:
        bound = asyncio.timeout(None)  # set once the outage is noted (`Outage.bounds`)
        try:
            async with bound:
                outage.bounds.add(bound)
                try:
                    if outage.since is not None:
                        bound.reschedule(asyncio.get_running_loop().time() + STOPPING_CALL_TIMEOUT)
                    return await call(*args, **kwargs)
                finally:
                    outage.bounds.discard(bound)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and bound.expired():
                return fallback()
            if outage.refused(exc):
                return fallback()
            if name not in ("finish_job", "retry_job") or not _handed_on(exc):
                raise
            job = kwargs.get("job", args[0] if args else None)
            log.warning("job %s was handed on meanwhile: left as it is", getattr(job, "id", "?"))
            return fallback()

    return guarded


def _handed_on(exc: BaseException | None) -> bool:
    """Whether `exc` (procrastinate's `ConnectorException`, the database's error as its
    cause) is the refusal `HANDED_ON`."""
    while exc is not None:
        if HANDED_ON in str(exc):
            return True
        exc = exc.__cause__
    return False


class _QuietPsycopg(logging.Filter):
    """Drop psycopg's warnings during a noted outage: its pool retries on a schedule of its
    own, a line each time ("error connecting", "discarding closed connection"), and a
    bounded call leaves "query cancellation failed", beside the worker's one line an
    attempt. Its errors stay."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        return self.outage.since is None or record.levelno >= logging.ERROR


class _OneLine(logging.Filter):
    """During a noted outage, fim's line about a write the store refused (a stopping job's
    usage, its run record) keeps the reason, not the traceback: the outage is expected."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        failed = record.exc_info[1] if record.exc_info else None
        line = store_failure(failed) if failed is not None else None
        if self.outage.since is not None and line is not None:
            record.msg, record.args = f"{record.getMessage()} ({line})", None
            record.exc_info, record.exc_text = None, None
        return True


def postgres_probe(dsn: str) -> Callable[[], Awaitable[None]]:
    """One query on a connection of its own (the worker's pool is closed meanwhile)."""

    async def probe() -> None:
        # deferred: psycopg is loaded where the queue is, and only past an outage here
        import psycopg

        try:
            async with asyncio.timeout(2 * PROBE_TIMEOUT):  # a connection that never answers
                async with await psycopg.AsyncConnection.connect(
                    dsn, autocommit=True, connect_timeout=PROBE_TIMEOUT
                ) as conn:
                    await conn.execute("SELECT 1")
        except TimeoutError:
            raise psycopg.OperationalError(f"no answer in {2 * PROBE_TIMEOUT} s") from None

    return probe


async def ride_out(
    session: Callable[[], Coroutine[Any, Any, None]],
    outage: Outage,
    probe: Callable[[], Awaitable[None]],
    *,
    on_down: Callable[[], None] = lambda: None,
    on_up: Callable[[], None] = lambda: None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> None:
    """Run `session` (one procrastinate worker, from opening the queue's pool to its
    stop) until SIGTERM or SIGINT stops it, again after each store outage that ended it
    (`reconnect`). A session ending by itself otherwise is a `RunError`: exiting 0 would
    leave a supervisor that restarts on failure with no worker."""
    loop = asyncio.get_running_loop()
    signalled = asyncio.Event()
    current: asyncio.Task[None] | None = None
    stopped: set[asyncio.Task[None]] = set()

    def stop() -> None:  # procrastinate stops a cancelled worker gracefully, once:
        # a second cancel (a signal during an outage's stop) cut its shutdown short
        if current is not None and not current.done() and current not in stopped:
            stopped.add(current)
            current.cancel()

    def on_signal() -> None:
        signalled.set()
        for sig in SIGNALS:  # a second signal stops the process, as procrastinate's did
            loop.remove_signal_handler(sig)
        stop()

    for sig in SIGNALS:
        with contextlib.suppress(NotImplementedError):  # Windows: as procrastinate, none
            loop.add_signal_handler(sig, on_signal)
    outage.on_refused = stop
    try:
        while True:
            current = asyncio.create_task(session())
            try:
                await asyncio.wait([current])
            except asyncio.CancelledError:  # this task is cancelled: the worker stops first
                current.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await current
                raise
            failed = None if current.cancelled() else current.exception()
            if failed is not None and not outage.refused(failed):
                raise failed
            if signalled.is_set():
                return
            if outage.since is None:
                raise RunError("the worker stopped by itself", hint="see the log lines above")
            on_down()
            await reconnect(outage, probe, signalled, sleep=sleep)
            if signalled.is_set():
                return
            on_up()
    finally:
        outage.on_refused = None
        for sig in SIGNALS:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)


async def reconnect(
    outage: Outage,
    probe: Callable[[], Awaitable[None]],
    signalled: asyncio.Event,
    *,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> None:
    """Probe the store with backoff (`BACKOFF`) until it answers or a signal arrives, one
    log line per failed attempt; `outage.gone()` raised once `outage.bound` seconds have
    passed since its first refusal."""
    # deferred: loading tenacity costs a few ms, and only an outage needs it
    import tenacity

    async def nap(seconds: float) -> None:  # a signal ends the wait
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(signalled.wait(), seconds)

    async def attempt() -> None:
        if not signalled.is_set():
            await probe()

    def before_sleep(state: tenacity.RetryCallState) -> None:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if exc is not None:
            outage.refused(exc)
        seconds = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "store %s: attempt %d refused (%s); next in %.1f s, giving up %g s after the "
            "first refusal",
            outage.url,
            state.attempt_number,
            outage.reason,
            seconds,
            outage.bound,
        )

    def wait(state: tenacity.RetryCallState) -> float:
        left = max(outage.bound - outage.elapsed(), 0.0)
        return min(BACKOFF.delay(state.attempt_number), left)

    retrying = tenacity.AsyncRetrying(
        stop=lambda state: outage.elapsed() >= outage.bound,
        wait=wait,
        retry=tenacity.retry_if_exception(lambda exc: store_failure(exc) is not None),
        before_sleep=before_sleep,
        reraise=True,
        sleep=sleep or nap,
    )
    try:
        await retrying(attempt)
    except Exception as exc:
        if not outage.refused(exc):
            raise
        raise outage.gone() from None
    if not signalled.is_set():
        log.info("store %s answers again after %.1f s: the worker starts again", outage.url,
                 outage.elapsed())  # fmt: skip
    outage.since = None
