"""The state store: runs, human approvals and the audit log, in SQLite or PostgreSQL.

State must outlive a process: a `confirm` hook waiting for a human, a workflow paused on a
`human` node, or an audit trail all have to survive a restart, and several processes (a
`fim serve`, a `fim approvals approve` in another shell) share them. SQLite (WAL mode,
busy timeout) is the zero-setup default; a `postgresql://` URL in fim.yaml `state:` moves
the same tables to a server. SQLAlchemy Core is synchronous, so every method hops to a
thread and the event loop never blocks on the database: PostgreSQL's work runs on
`asyncio.to_thread`, SQLite's on one writer thread that commits whatever has queued in one
transaction (`fim.store.writer`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fim.masking import known, mask_value
from fim.retries import Backoff, retry_sync
from fim.store.prepared import Prepared
from fim.store.records import Approval, ApprovalStatus, AuditEntry, RunRecord
from fim.store.schema import MIGRATIONS, json_text, normalize_url, sqlite_file
from fim.store.schema import table as _table
from fim.store.writer import GroupWriter

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from fim.run.services import Services

T = TypeVar("T")


# --------------------------------------------------------------------------- store


def _enable_wal(cursor: Any) -> None:
    """Switch the file to WAL (persistent once set). The switch needs a moment alone with
    the file and SQLite answers "locked" at once instead of waiting on the busy timeout, so
    two processes opening a new state file together retry here."""

    retry_sync(
        lambda: cursor.execute("PRAGMA journal_mode=WAL"),
        Backoff(100, 0.05, factor=1.0),
        retry_on=lambda exc: isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc),
    )


SQLITE_SYNCHRONOUS = "NORMAL"
"""SQLite's `synchronous` level (WAL mode). FULL fsyncs the WAL at every commit; NORMAL only
at checkpoints. A served run commits on its request path, and FULL cost it ~0.4 ms of CPU
and ~2 ms of latency (3 commits: 1.4-1.5 ms CPU and 3.3-4.0 ms wall per run against
1.1 ms and 1.3-2.0 ms, bench of the store alone). WAL + NORMAL stays consistent and loses
nothing when the process crashes or is killed; only a power loss or an OS crash may lose
the last commits before it (the database is never corrupted). PostgreSQL is the store for
state that must survive that."""


class Store:
    """One database of fim state. Create through `get_store(services)` to share it."""

    def __init__(self, url: str, root: Path | str | None = None) -> None:
        self.url = normalize_url(url, root)
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._writer: GroupWriter | None = None
        """SQLite: one thread does all the work. Its writers exclude each other, and
        several threads waiting on its busy handler (which sleeps up to 100 ms a try) gave
        a loaded server 0.2-1 s stalls; queued on one thread, what has queued is committed
        together (group commit)."""
        self._statements: dict[str, Any] = {}

    # ------------------------------------------------------------------ engine

    @property
    def display_url(self) -> str:
        """The URL with any password hidden, for messages."""
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy.engine import make_url

        return make_url(self.url).render_as_string(hide_password=True)

    def _connect(self) -> Engine:
        if self._engine is not None:
            return self._engine
        with self._lock:
            if self._engine is None:
                self._engine = self._create_engine()
            return self._engine

    def _create_engine(self) -> Engine:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import create_engine, event

        kwargs: dict[str, Any] = {"json_serializer": json_text}
        is_sqlite = self.url.startswith("sqlite")
        if is_sqlite:
            file = sqlite_file(self.url)
            if file is not None:
                file.parent.mkdir(parents=True, exist_ok=True)
            else:
                # deferred: loading sqlalchemy costs hundreds of ms
                from sqlalchemy.pool import StaticPool

                kwargs["poolclass"] = StaticPool
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        else:
            kwargs["pool_pre_ping"] = True
        engine = create_engine(self.url, **kwargs)
        if is_sqlite:

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                # Let us issue BEGIN ourselves: pysqlite's implicit transactions would
                # otherwise start deferred and fail to upgrade under concurrent writers.
                dbapi_conn.isolation_level = None
                cursor = dbapi_conn.cursor()
                cursor.execute("PRAGMA busy_timeout=10000")
                cursor.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
                _enable_wal(cursor)
                cursor.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        self._migrate(engine)
        return engine

    def _migrate(self, engine: Engine) -> None:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import func, select, text

        version_table = _table("schema_version")
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Two processes opening a fresh database must not both create the tables.
                conn.execute(text("SELECT pg_advisory_xact_lock(74211)"))
            version_table.create(conn, checkfirst=True)
            current = conn.execute(select(func.max(version_table.c.version))).scalar() or 0
            for number, migration in enumerate(MIGRATIONS, start=1):
                if number > current:
                    migration(conn)
                    conn.execute(version_table.insert().values(version=number))

    async def _tx(self, work: Callable[[Connection], T]) -> T:
        """Run `work(conn)` in one transaction (SQLite: perhaps shared with other units, in
        a SAVEPOINT of its own), on a worker thread."""
        if self.url.startswith("sqlite"):
            return await self._sqlite_writer().run(work)

        def go() -> T:
            with self._connect().begin() as conn:
                return work(conn)

        return await asyncio.to_thread(go)

    async def _write_behind(self, work: Callable[[Connection], Any], what: str) -> None:
        """Write without waiting for the commit where that is safe: SQLite (one process)
        queues `work` on its writer thread and returns at once; every later `_tx` of this
        process runs after it, and the next awaited one (a run's record) commits it too.
        PostgreSQL, shared with other processes, waits for the commit. A failure is
        logged as "could not store `what`" on SQLite, raised on PostgreSQL."""
        if self.url.startswith("sqlite"):
            self._sqlite_writer().defer(work, what)
        else:
            await self._tx(work)

    def _sqlite_writer(self) -> GroupWriter:
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = GroupWriter(self._connect)
        return self._writer

    def _statement(self, key: str, build: Callable[[], Any]) -> Any:
        """A statement built once per store (values bound at execute time): building it
        anew per call cost SQLAlchemy's construction and cache-key generation each time."""
        found = self._statements.get(key)
        if found is None:
            found = self._statements[key] = build()
        return found

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()  # writes what is queued first
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    async def schema_version(self) -> int:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import func, select

        version = _table("schema_version").c.version
        return await self._tx(lambda c: int(c.execute(select(func.max(version))).scalar() or 0))

    # ------------------------------------------------------------------ runs

    async def put_run(
        self, run_id: str, kind: str, name: str, status: str, data: dict[str, Any]
    ) -> None:
        """Insert or update a run; `created_at` is kept from the first write. Like every
        write here, the data is masked (`fim.masking.known`): the state database is an
        exit like any other (backups, replicas, `fim approvals list`)."""
        mask = known()
        name, data = mask.text(name), mask.value(data)

        def work(conn: Connection) -> None:
            now = time.time()
            values = {"kind": kind, "name": name, "status": status, "data": data}
            row = {"id": run_id, "created_at": now, "updated_at": now, **values}
            upsert = self._statement(
                f"put_run:{conn.dialect.name}",
                lambda: Prepared(lambda: _run_upsert(conn), list(row)),
            )
            upsert.execute(conn, [row])

        await self._tx(work)

    async def get_run(self, run_id: str) -> RunRecord | None:
        runs = _table("runs")
        row = await self._tx(
            lambda c: c.execute(runs.select().where(runs.c.id == run_id)).mappings().first()
        )
        return RunRecord(**row) if row else None

    async def list_runs(self, kind: str | None = None, limit: int = 50) -> list[RunRecord]:
        """Newest first."""
        runs = _table("runs")
        query = runs.select().order_by(runs.c.created_at.desc()).limit(limit)
        if kind is not None:
            query = query.where(runs.c.kind == kind)
        rows = await self._tx(lambda c: list(c.execute(query).mappings()))
        return [RunRecord(**row) for row in rows]

    # ------------------------------------------------------------------ approvals

    @staticmethod
    def _expire(conn: Connection) -> None:
        approvals = _table("approvals")
        conn.execute(
            approvals.update()
            .where(approvals.c.status == "pending")
            .where(approvals.c.expires_at.is_not(None))
            .where(approvals.c.expires_at <= time.time())
            .values(status="expired", resolved_at=approvals.c.expires_at, resolved_by="timeout")
        )

    @staticmethod
    def _approval(conn: Connection, approval_id: str) -> Approval | None:
        approvals = _table("approvals")
        row = conn.execute(approvals.select().where(approvals.c.id == approval_id)).mappings()
        found = row.first()
        return Approval(**found) if found else None

    async def create_approval(
        self,
        run_id: str,
        agent: str,
        tool_name: str,
        args: dict[str, Any],
        reason: str,
        expires_at: float | None,
        kind: str = "tool",
        data: dict[str, Any] | None = None,
    ) -> str:
        """Store a pending approval and return its id (short, to type in a shell)."""
        approval_id = uuid.uuid4().hex[:12]
        mask = known()
        args, reason, data = mask_value(args, mask.text), mask.text(reason), mask.value(data)
        insert = _table("approvals").insert().values(
            id=approval_id, run_id=run_id, agent=agent, tool_name=tool_name, args=args,
            reason=reason, kind=kind, data=data or {}, status="pending",
            created_at=time.time(), expires_at=expires_at,
        )  # fmt: skip
        await self._tx(lambda c: c.execute(insert))
        return approval_id

    async def get_approval(self, approval_id: str) -> Approval | None:
        """The approval, reading as `expired` once its deadline has passed."""

        def work(conn: Connection) -> Approval | None:
            self._expire(conn)
            return self._approval(conn, approval_id)

        return await self._tx(work)

    async def list_approvals(
        self,
        status: ApprovalStatus | None = "pending",
        *,
        agent: str | None = None,
        tool_name: str | None = None,
        limit: int = 200,
    ) -> list[Approval]:
        """Approvals with this status (None: all), newest first."""
        approvals = _table("approvals")
        query = approvals.select().order_by(approvals.c.created_at.desc()).limit(limit)
        for column, value in (("status", status), ("agent", agent), ("tool_name", tool_name)):
            if value is not None:
                query = query.where(approvals.c[column] == value)

        def work(conn: Connection) -> list[Approval]:
            self._expire(conn)
            return [Approval(**row) for row in conn.execute(query).mappings()]

        return await self._tx(work)

    async def resolve_approval(
        self,
        approval_id: str,
        approved: bool,
        by: str = "cli",
        data: dict[str, Any] | None = None,
    ) -> Approval | None:
        """Approve or deny a *pending* approval; `data` is merged into its data.

        Returns the approval as it now is (unchanged when it was no longer pending, so the
        caller can say it had already expired or been decided), or None for an unknown id.
        """
        approvals = _table("approvals")

        def work(conn: Connection) -> Approval | None:
            self._expire(conn)
            current = self._approval(conn, approval_id)
            if current is None or current.status != "pending":
                return current
            conn.execute(
                approvals.update()
                .where(approvals.c.id == approval_id)
                .where(approvals.c.status == "pending")
                .values(
                    status="approved" if approved else "denied",
                    resolved_at=time.time(),
                    resolved_by=by,
                    data=known().value({**current.data, **(data or {})}),
                )
            )
            return self._approval(conn, approval_id)

        return await self._tx(work)

    async def consume_approval(self, approval_id: str) -> bool:
        """Mark an approved approval as used; False if it was not approved or already used.

        This makes one approval allow exactly one call, even when a restarted run and the
        original one both find it.
        """
        approvals = _table("approvals")
        update = (
            approvals.update()
            .where(approvals.c.id == approval_id)
            .where(approvals.c.status == "approved")
            .where(approvals.c.consumed_at.is_(None))
            .values(consumed_at=time.time())
        )
        return bool(await self._tx(lambda c: c.execute(update).rowcount))

    async def wait_approval(
        self, approval_id: str, timeout: float, poll: float = 0.25
    ) -> Approval | None:
        """Poll until the approval is decided or expires, or `timeout` seconds pass.

        Polling (not notifications) because the decision may come from another process on
        another machine; SQLite and PostgreSQL both serve it without extra moving parts.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            approval = await self.get_approval(approval_id)
            if approval is None or approval.status != "pending":
                return approval
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return approval
            wait = poll
            if approval.expires_at is not None:
                wait = min(wait, max(0.0, approval.expires_at - time.time()) + 0.005)
            await asyncio.sleep(min(wait, remaining))

    # ------------------------------------------------------------------ audit

    async def audit(self, entry: dict[str, Any]) -> None:
        """Append one audit entry (keys: run_id, agent, tool, args, outcome, duration_ms,
        detail, ts). Masked again here (values under credential-looking keys too)."""
        mask = known()
        entry = {**entry, "args": mask_value(entry.get("args") or {}, mask.text)}
        entry["detail"] = mask.text(entry["detail"]) if entry.get("detail") else None
        insert = (
            _table("audit")
            .insert()
            .values(
                ts=float(entry.get("ts") or time.time()),
                run_id=str(entry.get("run_id", "")),
                agent=str(entry.get("agent", "")),
                tool=str(entry.get("tool", "")),
                args=entry.get("args") or {},
                outcome=str(entry.get("outcome", "")),
                duration_ms=entry.get("duration_ms"),
                detail=entry.get("detail"),
            )
        )
        await self._tx(lambda c: c.execute(insert))

    async def list_audit(
        self, limit: int = 100, *, run_id: str | None = None, agent: str | None = None
    ) -> list[AuditEntry]:
        """Newest first."""
        audit = _table("audit")
        query = audit.select().order_by(audit.c.id.desc()).limit(limit)
        if run_id is not None:
            query = query.where(audit.c.run_id == run_id)
        if agent is not None:
            query = query.where(audit.c.agent == agent)
        rows = await self._tx(lambda c: list(c.execute(query).mappings()))
        return [AuditEntry(**row) for row in rows]


def _run_upsert(conn: Connection) -> Any:
    """INSERT a run, or UPDATE it keeping `created_at`: one statement (both dialects have
    ON CONFLICT) instead of an UPDATE and, for every new run, an INSERT after it."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy.dialects import postgresql, sqlite

    runs = _table("runs")
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement: Any = dialect.insert(runs)
    kept = {c: statement.excluded[c] for c in ("kind", "name", "status", "data", "updated_at")}
    return statement.on_conflict_do_update(index_elements=[runs.c.id], set_=kept)


def get_store(services: Services) -> Store:
    """The process-wide Store for `services.state_url`, created on first use."""
    url = _store_url(services.state_url, services.root)
    return services.get(f"store:{url}", lambda: Store(url), closer=Store.close)


_URLS: dict[tuple[str, str], str] = {}
"""Normalized state URLs by (URL, project root): every run records its usage, and
resolving the SQLite path against the file system each time cost ~0.2 ms a run."""


def _store_url(url: str, root: Path | str | None) -> str:
    if root is None:  # relative to the current directory, which may change
        return normalize_url(url, root)
    key = (url, str(root))
    found = _URLS.get(key)
    if found is None:
        if len(_URLS) > 256:
            _URLS.clear()
        found = _URLS[key] = normalize_url(url, root)
    return found


__all__ = [
    "MIGRATIONS",
    "Approval",
    "ApprovalStatus",
    "AuditEntry",
    "RunRecord",
    "Store",
    "get_store",
    "normalize_url",
]
