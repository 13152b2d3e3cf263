"""SQLite's one writer thread, with group commit.

A SQLite file has one writer at a time, and each commit is the expensive part of a write
(the WAL append, the lock, SQLAlchemy's transaction bookkeeping). A served run writes three
things (its usage, its events, its record), and ten concurrent runs thirty: one
transaction each made the writer thread the biggest CPU cost of `fim serve` after the run
itself. So every unit of work queues here, and the thread takes *everything* queued when it
wakes and runs it in one transaction, each unit in a SAVEPOINT of its own (one that fails
is rolled back and reported to its caller alone; the others commit).

Two ways in:

- `run(work)`: wait for the commit and get the result (or the exception). Everything
  queued before it is in the same or an earlier transaction, so when a caller hears back,
  all the writes it queued before are durable too (to the `synchronous` level of the store).
- `defer(work)`: queue and return at once. It is written with the next `run`, or after
  `flush_after` seconds if none comes (at the latest when the store closes or the
  interpreter exits), and in order: a later `run` of this process (a read included) sees
  it. Failures are logged. For writes whose caller does not need to wait:
  a run's usage row, written just before the run's record, which is awaited anyway.

One connection is kept for the life of the thread (no pool checkout per transaction).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

T = TypeVar("T")

log = logging.getLogger("fim.store")


class _Item(Generic[T]):
    __slots__ = ("error", "future", "loop", "result", "what", "work")

    def __init__(
        self,
        work: Callable[[Connection], T],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[T] | None,
        what: str = "",
    ) -> None:
        self.work = work
        self.what = what
        self.loop = loop
        self.future = future
        self.result: Any = None
        self.error: BaseException | None = None


class GroupWriter:
    """Runs units of work on one thread, everything queued together in one transaction."""

    def __init__(
        self, engine: Callable[[], Engine], *, name: str = "fim-store", flush_after: float = 0.05
    ) -> None:
        self._engine = engine
        self._name = name
        self.flush_after = flush_after
        self._lock = threading.Lock()
        self._queue: list[_Item[Any]] = []
        self._submitted = False
        """A batch job is on the executor and has not taken the queue yet."""
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        """The loop whose flush timer is armed for the deferred units (None: no timer)."""
        self._executor: ThreadPoolExecutor | None = None
        self._conn: Connection | None = None
        self.batches = 0
        """Transactions committed (or tried) so far: tests see group commit happen."""
        _WRITERS.add(self)

    async def run(self, work: Callable[[Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._put(_Item(work, loop, future), now=True)
        return await future

    def defer(self, work: Callable[[Connection], Any], what: str) -> None:
        """Queue `work` without waiting for it (call from a running event loop); a failure
        is logged as "could not store `what`"."""
        loop = asyncio.get_running_loop()
        if self._put(_Item(work, loop, None, what), now=False):
            loop.call_later(self.flush_after, self._kick, loop)

    def _put(self, item: _Item[Any], *, now: bool) -> bool:
        """Queue `item`; True when the caller must arm the flush timer."""
        with self._lock:
            self._queue.append(item)
            if self._submitted:
                return False
            if now:
                self._submit()
                return False
            timer = self._timer_loop
            if timer is not None and timer is item.loop and not timer.is_closed():
                return False
            self._timer_loop = item.loop  # none armed, or on a loop that is gone
            return True

    def _kick(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._timer_loop is loop:
                self._timer_loop = None
            if self._queue and not self._submitted:
                self._submit()

    def _submit(self) -> None:  # with self._lock held
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        self._submitted = True
        self._executor.submit(self._batch)

    # ------------------------------------------------------------------ writer thread

    def _batch(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
            self._submitted = False
        # a caller that was cancelled before its turn does not want its work done
        items = [i for i in batch if i.future is None or not i.future.cancelled()]
        if items:
            self._write(items)
        self._deliver(items)

    def _write(self, items: list[_Item[Any]]) -> None:
        self.batches += 1
        conn = self._conn
        try:
            if conn is None or conn.closed or conn.invalidated:
                conn = self._conn = self._engine().connect()
            with conn.begin():
                if len(items) == 1:
                    items[0].result = items[0].work(conn)
                else:
                    # on the sqlite3 connection itself: SQLAlchemy's begin_nested() (or
                    # even exec_driver_sql) costs more per SAVEPOINT than a unit's write
                    raw: Any = conn.connection.driver_connection
                    for item in items:
                        raw.execute("SAVEPOINT fim_unit")
                        try:
                            item.result = item.work(conn)
                        except Exception as exc:
                            item.error = exc
                            raw.execute("ROLLBACK TO fim_unit")
                        raw.execute("RELEASE fim_unit")
        except Exception as exc:  # BEGIN or COMMIT failed: nothing of the batch was written
            for item in items:
                item.error = item.error or exc
            if conn is not None and conn.invalidated:
                self._close_conn()

    def _deliver(self, items: list[_Item[Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Item[Any]]] = {}
        for item in items:
            if item.future is None:
                if item.error is not None:
                    log.error("could not store %s", item.what, exc_info=item.error)
                continue
            by_loop.setdefault(item.loop, []).append(item)
        for loop, waiting in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_resolve, waiting)

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing the state store connection failed", exc_info=True)

    def close(self) -> None:
        """Write what is queued, then stop the thread and close its connection."""
        with self._lock:
            if self._queue and not self._submitted:
                self._submit()
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.submit(self._close_conn)
            executor.shutdown(wait=True)
        else:
            self._close_conn()


_WRITERS: weakref.WeakSet[GroupWriter] = weakref.WeakSet()


@atexit.register
def _write_what_waits() -> None:
    """At interpreter exit, write the deferred units nobody closed the store for (their
    loop, which would have fired the flush timer, is gone): a `fim` command that ends
    right after a run still has that run's usage row written. A batch already handed to
    the thread was run by concurrent.futures' own exit hook, which comes first."""
    for writer in list(_WRITERS):
        with writer._lock:
            waiting = bool(writer._queue) and not writer._submitted
        if waiting:
            writer._batch()
        writer._close_conn()


def _resolve(items: list[_Item[Any]]) -> None:
    for item in items:
        future = item.future
        if future is None or future.done():
            continue
        if item.error is not None:
            future.set_exception(item.error)
        else:
            future.set_result(item.result)
