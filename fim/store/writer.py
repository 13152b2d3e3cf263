"""The state store's writer: one thread, one connection, group commit.

Each commit is the expensive part of a write (SQLite: the WAL append and the file lock;
PostgreSQL: a round trip, and the pool checkout, BEGIN and COMMIT bookkeeping around it).
A served run writes several things (its events, its usage, its record) and ten concurrent
runs ten times that, so every write of a process queues here and one thread takes
*everything* queued when it wakes and commits it in one transaction. SQLite's reads queue
here too: a SQLite file has one writer, and a read must see what this process queued
before it.

A unit that raises rolls the transaction back; then each unit of the batch runs again
alone, in its own transaction, so the failure reaches its own caller and the others are
committed. A unit must therefore be a function of the connection and of what it captured,
with no effect outside the database. A failure at COMMIT is reported to every unit of the
batch (nothing is retried then: whether the server committed is unknown).

Two ways in:

- `run(work, key)`: wait for the commit, get the result or the exception. Everything
  queued before it is in the same or an earlier transaction, so a caller that hears back
  knows its earlier deferred writes are durable too.
- `defer(work, what, key)`: queue and return at once (SQLite's usage row and event log of
  a run, written with the run's record awaited right after). Written with the next `run`,
  or `flush_after` seconds later if none comes, at the latest when the store closes or
  the interpreter exits. A failure is logged, and the next `run` with the same `key` (the
  run's record) raises `WriteBehindError` once its own work is committed: a run's record
  never hides that its usage or events were lost.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from sqlalchemy import Connection

T = TypeVar("T")

log = logging.getLogger("fim.store")

_LOST_KEPT = 1000
"""Failures of deferred units kept for the `run` of their key; the oldest go first."""
CLOSE_WITHIN = 10.0
"""Seconds `close` gives what is queued to be written (a server's runs had uvicorn's 30 s
of graceful shutdown before); what is left then is reported lost, not waited for. A
database another session kept locked held a server's SIGTERM as long as the lock lasted
(attack-35 #2)."""
LAST_STATEMENT = 15.0
"""...plus this, for the statement in progress at that moment (a lock is waited for 10 s:
`fim.store.engine.WAIT_FOR_LOCKS_MS`)."""


class WriteBehindError(RuntimeError):
    """A deferred unit failed; raised by the next awaited write with its key."""


class _Item(Generic[T]):
    __slots__ = ("error", "future", "key", "loop", "result", "what", "work")

    def __init__(
        self,
        work: Callable[[Connection], T],
        loop: asyncio.AbstractEventLoop | None,
        future: asyncio.Future[T] | None,
        what: str,
        key: str | None,
    ) -> None:
        self.work, self.loop, self.future, self.what, self.key = work, loop, future, what, key
        self.result: Any = None
        self.error: BaseException | None = None


class GroupWriter:
    """Runs units of work on one thread, everything queued together in one transaction."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        *,
        name: str = "fim-store",
        flush_after: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = connect
        self._clock = clock
        self._give_up_at: float | None = None
        """Set by `close`: work not begun by then is reported lost instead."""
        self._name = name
        self.flush_after = flush_after
        self._queue: queue.SimpleQueue[_Item[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._conn: Connection | None = None
        self._lost: dict[str, str] = {}
        """Key -> what of it could not be stored, until a `run` with that key hears it."""
        self.batches = 0
        """Transactions tried so far (retries alone not counted): tests see group commit."""
        _WRITERS.add(self)

    async def run(
        self, work: Callable[[Connection], T], key: str | None = None, what: str = ""
    ) -> T:
        """Run `work` and return its result once committed. With `what` (a write behind
        that its caller awaits), a failure is also kept for the next `run` with `key` and no
        `what`, as a deferred unit's is; without, that `run` raises `WriteBehindError`
        for what was lost (after committing its own work)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._put(_Item(work, loop, future, what, key))
        return await future

    def defer(self, work: Callable[[Connection], Any], what: str, key: str | None = None) -> None:
        """Queue `work` without waiting for it; a failure is logged as "could not store
        `what`" and raised by the next `run` with `key`."""
        self._put(_Item(work, None, None, what, key))

    def _put(self, item: _Item[Any]) -> None:
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name=self._name)
                    self._thread.daemon = True  # stopped by close() (or at exit, below)
                    self._thread.start()
        self._queue.put(item)

    def close(self, within: float = CLOSE_WITHIN) -> None:
        """Write what is queued, then stop the thread and close its connection. Work not
        begun `within` seconds from now is logged as not stored (`CLOSE_WITHIN`)."""
        with self._start:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._give_up_at = self._clock() + within
                self._queue.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(within + LAST_STATEMENT)
            if thread.is_alive():
                log.error(
                    "the state store did not finish writing within %.0f s of closing; what "
                    "it still holds is not stored",
                    within + LAST_STATEMENT,
                )

    # ------------------------------------------------------------------ writer thread

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            deadline: float | None = None
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    if any(i.future is not None for i in batch):
                        break  # somebody waits: commit now
                    # only deferred units: give an awaited write `flush_after` to join them
                    deadline = deadline or time.monotonic() + self.flush_after
                    try:
                        item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            try:
                self._batch(batch)
            except Exception as exc:  # a bug here must not leave callers waiting forever
                log.exception("the state store's writer failed")
                for item in batch:
                    if item.future is not None and item.loop is not None:
                        with contextlib.suppress(RuntimeError):
                            item.loop.call_soon_threadsafe(_fail, item.future, exc)
        self._close_conn()

    def _batch(self, batch: list[_Item[Any]]) -> None:
        # a caller cancelled before its turn does not want its work done
        items = [i for i in batch if i.future is None or not i.future.cancelled()]
        if not items:
            return
        self.batches += 1
        if self._late(items) or (
            not self._transaction(items) and (len(items) > 1 or self._conn is None)
        ):
            for item in items:  # rolled back: each alone (a dropped connection: once more)
                if not self._late([item]):
                    item.error = None
                    self._transaction([item])
        self._deliver(items)

    def _late(self, items: list[_Item[Any]]) -> bool:
        """Past `close`'s deadline: `items` are failed, not tried (each try may wait for a
        lock as long again)."""
        if self._give_up_at is None or self._clock() < self._give_up_at:
            return False
        for item in items:
            item.error = item.error or RuntimeError(
                "not stored: the state store was closing, and its database did not take "
                "the write in time (locked or unreachable)"
            )
        return True

    def _transaction(self, items: list[_Item[Any]]) -> bool:
        """Run `items` in one transaction; False when it failed before COMMIT (nothing was
        written, each can run again)."""
        current = items[0]
        try:
            conn = self._conn
            if conn is None or conn.closed or conn.invalidated:
                conn = self._conn = self._connect()
            transaction = conn.begin()
            for current in items:
                current.result = current.work(conn)
        except Exception as exc:
            current.error = exc
            self._after_failure(rollback=True)
            return False
        try:
            transaction.commit()
        except Exception as exc:
            for item in items:
                item.error = exc
            self._after_failure(rollback=False)
        return True

    def _after_failure(self, *, rollback: bool) -> None:
        conn = self._conn
        if conn is None:
            return
        if rollback and not conn.invalidated:
            try:
                conn.rollback()
                return
            except Exception:
                log.debug("rolling back the state store's transaction failed", exc_info=True)
        self._close_conn()  # a dropped connection: the next transaction opens another

    def _deliver(self, items: list[_Item[Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Item[Any]]] = {}
        for item in items:
            if item.error is not None and item.what:
                log.error("could not store %s", item.what, exc_info=item.error)
                if item.key is not None:
                    lost = self._lost.get(item.key)
                    self._lost[item.key] = f"{lost}; {item.what}" if lost else item.what
                    while len(self._lost) > _LOST_KEPT:
                        del self._lost[next(iter(self._lost))]
            if item.future is None:
                continue
            if item.key in self._lost and not item.what and item.error is None:
                item.error = WriteBehindError(
                    f"could not store {self._lost.pop(item.key)} (the log says why)"
                )
            assert item.loop is not None
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


_WRITERS: weakref.WeakSet[GroupWriter] = weakref.WeakSet()


@atexit.register
def _write_what_waits() -> None:
    """At interpreter exit, write the deferred units nobody closed the store for: a `fim`
    command that ends right after a run still has that run's usage row written."""
    for writer in list(_WRITERS):
        writer.close()


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _resolve(items: list[_Item[Any]]) -> None:
    for item in items:
        future = item.future
        if future is None or future.done():
            continue
        if item.error is not None:
            future.set_exception(item.error)
        else:
            future.set_result(item.result)
