"""Run events in the state store and their live tail from any process (issue 24).

A run's events are appended to `fim_run_events` as the run goes, so `GET /v1/runs/{id}`
and `GET /v1/runs/{id}/events` answer from any replica on the same database, while the run
is still going on another one (or on a `fim worker`).

Stored events are masked like every exit, and streamed tokens as a stream (`StreamMasker`):
a secret the model streams in two tokens, masked one row at a time, would be stored in two
rows that no form matches, and joining a run's tokens would give it back.

Writing never makes the run wait: `EventLog.add` queues the event and one background task
per run writes whatever has queued in one transaction, in order (a burst of events costs a
handful of writes). On PostgreSQL the transaction ends with `pg_notify('fim_run_events',
run_id)`, delivered at commit; every process keeps one `LISTEN` connection (psycopg's async
`notifies()`) and wakes the tails of that run, which then read what is new. That read after
each notification is the only read loop: nothing here polls on a timer. In the writing
process the tails are woken directly too, which is all SQLite (one process) needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fim.masking import StreamMasker, known
from fim.store.event_batches import BATCH_BYTES, stored_batch
from fim.store.prepared import Prepared
from fim.store.schema import table
from fim.tasks import spawn

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.store import Store

log = logging.getLogger("fim.store.live")

CHANNEL = "fim_run_events"
TERMINAL_EVENTS = frozenset({"run_finished", "workflow_finished"})
"""An event that ends a tail (a workflow resumed later appends after its `paused` end)."""
TERMINAL_STATUS = frozenset({"ok", "error", "failed", "cancelled", "max_iterations"})


# --------------------------------------------------------------------------- writing


class EventLog:
    """Appends one run's events to the store in the background, in order.

    The first write also records the run as `running` when the store has no record of it
    yet, so `GET /v1/runs/{id}` finds a run in progress from any replica.
    """

    def __init__(
        self, store: Store, run_id: str, kind: str, name: str, *, record: bool = True
    ) -> None:
        self._store = store
        self.run_id = run_id
        self._kind, self._name = kind, name
        self._record = record
        """Write a `running` record first (agent runs; a workflow writes its own)."""
        self._pending: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._next: int | None = None  # next sequence number, read on the first write
        self.failed = False

        self._local: list[dict[str, Any]] | None = None
        if record and not store.url.startswith("postgresql"):  # agent runs: fresh ids
            # SQLite serves one process: its tails read the run from memory while it goes,
            # and the log is written once at the end, with the run's record.
            self._local = _BUFFERS.setdefault((store.url, run_id), [])
        self._tokens = StreamMasker(known())
        self._last_token: dict[str, Any] | None = None

    def add(self, event: dict[str, Any]) -> None:
        """Queue one event (JSON-ready); written soon, in order, by one task.

        A token's text is masked as a stream: what could begin a secret is held back and
        goes out with the next token, or, before the next other event, as a token of its
        own (the last token's fields, the held text), as the SSE of a run does
        (`fim.server.streams.sse`). A token left with no text is not stored. So no row holds
        a piece of a secret, and the stored tokens still join to the run's (masked) text,
        for whoever replays or tails them (`/v1/runs/{id}/events`, from any replica)."""
        if event.get("type") == "token":
            masker = known()
            if masker is not self._tokens.masker:  # the process learnt a secret meanwhile
                self._tokens = self._tokens.using(masker)
            self._last_token = event
            text = self._tokens.feed(str(event.get("text", "")))
            if text:
                self._queue({**event, "text": text})
            return
        self._release()
        self._queue(event)

    def _release(self) -> None:
        """Queue what the token stream holds back, as a token of its own."""
        held = self._tokens.flush()
        if held and self._last_token is not None:
            self._queue({**self._last_token, "text": held})

    def _queue(self, event: dict[str, Any]) -> None:
        if self._local is not None:
            self._local.append(event)
            wake(self._store.url, self.run_id)
            return
        self._pending.append(event)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def flush(self) -> None:
        """Wait until what was added is readable from every process (PostgreSQL: written;
        SQLite: it already is, from this process's memory)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            write = self._unit(batch)
            try:
                self._next = await self._store._tx(write, self.run_id, self._what)
            except Exception:  # a lost event must never fail the run (its record says so)
                self.failed = True
                continue
            wake(self._store.url, self.run_id)

    @property
    def _what(self) -> str:
        return f"the events of run {self.run_id}"

    def _unit(self, batch: list[dict[str, Any]]) -> Callable[[Connection], int]:
        """The write of `batch` (masked here, in one pass: nearly always clean): a unit of
        the store's writer, which may run it again alone after a rollback, so it changes
        nothing but the database and returns the next sequence number."""
        events, first, record = known().value(batch), self._next, self._record
        kind, name, run_id = self._kind, self._name, self.run_id

        def write(conn: Connection) -> int:
            seq = first
            if seq is None:
                seq = int(_LAST_SEQ.scalar(conn, {"run": run_id}) or 0) + 1
                if record:
                    now = time.time()
                    row: dict[str, Any] = {"id": run_id, "kind": kind, "name": name}
                    row.update(status="running", data={}, created_at=now, updated_at=now)
                    _RUNNING.execute(conn, [row])
            _INSERT.execute(
                conn, [{"run_id": run_id, "seq": seq + i, "event": e} for i, e in enumerate(events)]
            )
            if conn.dialect.name == "postgresql":
                _NOTIFY.execute(conn, [{"run": run_id}])
            return seq + len(events)

        return write

    async def close(self) -> None:
        """Wait until every queued event is written (what the token stream held back too:
        a run that ends on a token, or is cut off, still has all of its text)."""
        self._release()
        if self._local is not None:
            if self._local:
                self._record = False  # the caller writes the record with its final status
                # one write for the whole run, committed with the record the caller writes
                # next; reads of the table queue behind it (fim.store.writer)
                await self._store._write_behind(self._unit(self._local), self._what, self.run_id)
            if _BUFFERS.get((self._store.url, self.run_id)) is self._local:
                del _BUFFERS[(self._store.url, self.run_id)]
            self._local = None
            wake(self._store.url, self.run_id)
            return
        await self.flush()


def _last_seq() -> Any:
    # deferred: a third-party package, loaded only when this path runs
    from sqlalchemy import bindparam, func, select

    events = table("run_events")
    return select(func.max(events.c.seq)).where(events.c.run_id == bindparam("run"))


def _running() -> Any:
    """A run's `running` record, unless it has one (a queued run, a resumed one)."""
    # deferred: a third-party package, loaded only when this path runs
    from sqlalchemy.dialects import postgresql

    return postgresql.insert(table("runs")).on_conflict_do_nothing(index_elements=["id"])


def _notify() -> Any:
    """`pg_notify(channel, run id)`: delivered at commit to every process's listener."""
    # deferred: a third-party package, loaded only when this path runs
    from sqlalchemy import String, bindparam, func, literal_column, select

    return select(func.pg_notify(literal_column(f"'{CHANNEL}'"), bindparam("run", type_=String)))


_LAST_SEQ = Prepared(_last_seq, ["run"])
_RUNNING = Prepared(_running, ["id", "kind", "name", "status", "data", "created_at", "updated_at"])
_INSERT = Prepared(lambda: table("run_events").insert(), ["run_id", "seq", "event"])
_NOTIFY = Prepared(_notify, ["run"])
"""The statements of `EventLog`, compiled once per dialect (`fim.store.prepared`): building
them per write cost SQLAlchemy's construction and cache-key generation every run."""


async def recorded(
    store: Store, run_id: str, kind: str, name: str, events: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    """Pass `events` (fim.events objects) through, appending each to the run's event log;
    the log is complete when the iteration ends. For workflows: their record is theirs."""
    log = EventLog(store, run_id, kind, name, record=False)
    try:
        async for event in events:
            log.add(event.model_dump(mode="json"))
            yield event
    finally:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # a client gone: the log is still closed
            spawn(log.close())
        else:
            await log.close()


# --------------------------------------------------------------------------- reading


async def read_events(
    store: Store, run_id: str, after: int = 0, limit: int | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """`(seq, event)` of run `run_id` after sequence number `after`, oldest first: all of
    them (`fim runs show`), or the first `limit`. Unbounded: server routes read `read_batch`."""
    rows, _more = await read_batch(store, run_id, after, limit=limit or 2**62, max_bytes=None)
    return rows


async def read_batch(
    store: Store,
    run_id: str,
    after: int = 0,
    *,
    limit: int = 1000,
    max_bytes: int | None = BATCH_BYTES,
) -> tuple[list[tuple[int, dict[str, Any]]], bool]:
    """`read_events`, stopping before the event that would take the stored JSON read past
    `max_bytes` (an event larger than that comes alone); and whether more events were
    stored then. A run still in this process's memory (SQLite) is read from there: its
    events are held already, and the batch only refers to them."""
    local = _BUFFERS.get((store.url, run_id))
    if local is not None:  # SQLite, running in this process: not in the table yet
        batch = local[after : after + limit]
        more = len(local) > after + len(batch)
        return [(i, e) for i, e in enumerate(batch, start=after + 1)], more
    return await stored_batch(store, run_id, after, limit, max_bytes)


async def tail(
    store: Store, run_id: str, after: int = 0
) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """Every event of the run after `after`, then each new one as it is written, until the
    run's last event (or its record says it ended). Subscribes before reading, so an event
    committed between the read and the wait still wakes it."""
    deadline: float | None = None  # once the record says the run ended
    async with subscribe(store, run_id) as woken:
        while True:
            woken.clear()
            rows, more = await read_batch(store, run_id, after)
            for seq, event in rows:  # at most `BATCH_BYTES` of stored events at a time
                after = seq
                yield seq, event
                if event.get("type") in TERMINAL_EVENTS:
                    return
            if more:
                continue  # a long backlog: read on before waiting
            record = await store.get_run(run_id)
            if record is None and running_here(store, run_id):
                await woken.wait()
                continue
            if record is None or record.status in TERMINAL_STATUS:
                # A workflow records its end before its last event is written: wait up to
                # 5 s for that event (a producer that died never writes it). Each wake-up
                # re-reads, so a notification of an earlier batch does not end the wait.
                now = asyncio.get_running_loop().time()
                deadline = now + 5.0 if deadline is None else deadline
                if now >= deadline:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), deadline - now)
                continue
            await woken.wait()


# --------------------------------------------------------------------------- waking


def running_here(store: Store, run_id: str) -> bool:
    """A run of this process whose events are still only in memory (SQLite)."""
    return (store.url, run_id) in _BUFFERS


_BUFFERS: dict[tuple[str, str], list[dict[str, Any]]] = {}
"""(store URL, run id) -> events so far of a SQLite-stored run going on in this process."""
_LOCAL: dict[tuple[str, str], set[asyncio.Event]] = {}
"""(store URL, run id) -> the events of the tails waiting in this process."""
_LISTENERS: dict[str, _Listener] = {}


def wake(url: str, run_id: str) -> None:
    for event in _LOCAL.get((url, run_id), ()):
        event.set()


def _wake_all(url: str) -> None:
    for (each_url, _run), waiting in _LOCAL.items():
        if each_url == url:
            for event in waiting:
                event.set()


@contextlib.asynccontextmanager
async def subscribe(store: Store, run_id: str) -> AsyncIterator[asyncio.Event]:
    """An event set whenever run `run_id` has new events (in any process on PostgreSQL)."""
    woken = asyncio.Event()
    key = (store.url, run_id)
    _LOCAL.setdefault(key, set()).add(woken)
    try:
        if store.url.startswith("postgresql"):
            listener = _LISTENERS.get(store.url)
            if listener is None or listener.loop is not asyncio.get_running_loop():
                listener = _LISTENERS[store.url] = _Listener(store.url)
            await listener.ready()
        yield woken
    finally:
        waiting = _LOCAL.get(key)
        if waiting is not None:
            waiting.discard(woken)
            if not waiting:
                del _LOCAL[key]


def libpq_dsn(url: str) -> str:
    """The psycopg DSN of a SQLAlchemy `postgresql+psycopg://` URL."""
    # deferred: a third-party package, loaded only when this path runs
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class _Listener:
    """One `LISTEN fim_run_events` connection per process and database. When it drops it
    reconnects and wakes every tail, whose read then catches up on what it missed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        self._task = self.loop.create_task(self._run(), name="fim-run-events-listen")

    async def ready(self) -> None:
        await self._ready.wait()

    async def _run(self) -> None:
        # deferred: a third-party package, loaded only when this path runs
        import psycopg

        delay = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    libpq_dsn(self.url), autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._ready.set()
                    _wake_all(self.url)  # anything committed before LISTEN is read now
                    delay = 0.1
                    async for note in conn.notifies():
                        wake(self.url, note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("run event listener: %s; reconnecting", exc)
            self._ready.set()  # tails fall back to their catch-up read, never hang on us
            _wake_all(self.url)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            self._ready.clear()


def close_listeners() -> None:
    """Stop this process's listeners (tests, shutdown)."""
    for listener in _LISTENERS.values():
        listener._task.cancel()
    _LISTENERS.clear()
