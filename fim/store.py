"""The state store: runs, human approvals and the audit log, in SQLite or PostgreSQL.

State must outlive a process: a `confirm` hook waiting for a human, a workflow paused on a
`human` node, or an audit trail all have to survive a restart, and several processes (a
`fim serve`, a `fim approvals approve` in another shell) share them. SQLite (WAL mode,
busy timeout) is the zero-setup default; a `postgresql://` URL in fim.yaml `state:` moves
the same tables to a server. SQLAlchemy Core is synchronous, so every method hops to a
thread with `asyncio.to_thread` and the event loop never blocks on the database.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine, MetaData, Table

    from fim.runtime import Services

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RunRecord:
    id: str
    kind: str
    name: str
    status: str
    data: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Approval:
    """A request for a human decision (a tool call, a workflow `human` node)."""

    id: str
    run_id: str
    agent: str
    tool_name: str
    args: dict[str, Any]
    reason: str
    kind: str
    data: dict[str, Any]
    status: ApprovalStatus
    created_at: float
    expires_at: float | None = None
    resolved_at: float | None = None
    resolved_by: str | None = None
    consumed_at: float | None = None
    """When a waiting caller acted on the approval, so one approval allows one call."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AuditEntry:
    id: int
    ts: float
    run_id: str
    agent: str
    tool: str
    args: dict[str, Any]
    outcome: str
    duration_ms: float | None = None
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- URLs


def normalize_url(url: str, root: Path | str | None = None) -> str:
    """Make a user's state URL usable by SQLAlchemy.

    Relative SQLite paths are relative to the project root (not the shell's cwd, so
    `fim approvals` from a subfolder finds the same file), and plain PostgreSQL URLs use
    the psycopg v3 driver, which is the one fim ships with.
    """
    url = url.strip()
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        rest = url[len("sqlite:///") :]
        path, sep, query = rest.partition("?")
        if path and path != ":memory:" and not path.startswith("file:"):
            base = Path(root) if root is not None else Path.cwd()
            absolute = (base / path).resolve()
            return f"sqlite:///{absolute}" + (sep + query if sep else "")
    return url


def _sqlite_file(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :].partition("?")[0]
        if path and path != ":memory:" and not path.startswith("file:"):
            return Path(path)
    return None


# --------------------------------------------------------------------------- schema

_SCHEMA: dict[str, Any] = {}


def _schema() -> tuple[MetaData, dict[str, Table]]:
    """Table objects, built on first use so importing this module stays cheap."""
    if not _SCHEMA:
        from sqlalchemy import JSON, Column, Float, Integer, MetaData, String, Table, Text

        meta = MetaData()
        tables = {
            "schema_version": Table(
                "fim_schema_version", meta, Column("version", Integer, primary_key=True)
            ),
            "runs": Table(
                "fim_runs",
                meta,
                Column("id", String(64), primary_key=True),
                Column("kind", String(32), nullable=False),
                Column("name", String(200), nullable=False),
                Column("status", String(32), nullable=False),
                Column("data", JSON, nullable=False),
                Column("created_at", Float, nullable=False, index=True),
                Column("updated_at", Float, nullable=False),
            ),
            "approvals": Table(
                "fim_approvals",
                meta,
                Column("id", String(64), primary_key=True),
                Column("run_id", String(64), nullable=False),
                Column("agent", String(200), nullable=False),
                Column("tool_name", String(200), nullable=False),
                Column("args", JSON, nullable=False),
                Column("reason", Text, nullable=False),
                Column("kind", String(32), nullable=False),
                Column("data", JSON, nullable=False),
                Column("status", String(16), nullable=False, index=True),
                Column("created_at", Float, nullable=False),
                Column("expires_at", Float),
                Column("resolved_at", Float),
                Column("resolved_by", String(200)),
                Column("consumed_at", Float),
            ),
            "audit": Table(
                "fim_audit",
                meta,
                Column("id", Integer, primary_key=True, autoincrement=True),
                Column("ts", Float, nullable=False, index=True),
                Column("run_id", String(64), nullable=False),
                Column("agent", String(200), nullable=False),
                Column("tool", String(200), nullable=False),
                Column("args", JSON, nullable=False),
                Column("outcome", String(16), nullable=False),
                Column("duration_ms", Float),
                Column("detail", Text),
            ),
        }
        _SCHEMA["meta"] = meta
        _SCHEMA["tables"] = tables
    return _SCHEMA["meta"], _SCHEMA["tables"]


def _migration_1(conn: Connection) -> None:
    meta, tables = _schema()
    meta.create_all(
        conn, tables=[tables[k] for k in ("runs", "approvals", "audit")], checkfirst=True
    )


MIGRATIONS: list[Callable[[Connection], None]] = [_migration_1]
"""Applied in order; migration N brings the schema to version N. Append, never edit."""


# --------------------------------------------------------------------------- store


class Store:
    """One database of fim state. Create through `get_store(services)` to share it."""

    def __init__(self, url: str, root: Path | str | None = None) -> None:
        self.url = normalize_url(url, root)
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ engine

    @property
    def display_url(self) -> str:
        """The URL with any password hidden, for messages."""
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
        from sqlalchemy import create_engine, event

        kwargs: dict[str, Any] = {}
        is_sqlite = self.url.startswith("sqlite")
        if is_sqlite:
            file = _sqlite_file(self.url)
            if file is not None:
                file.parent.mkdir(parents=True, exist_ok=True)
            else:
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
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA busy_timeout=10000")
                cursor.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        self._migrate(engine)
        return engine

    def _migrate(self, engine: Engine) -> None:
        from sqlalchemy import func, select, text

        _, tables = _schema()
        version_table = tables["schema_version"]
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

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    async def schema_version(self) -> int:
        from sqlalchemy import func, select

        table = _schema()[1]["schema_version"]

        def go() -> int:
            with self._connect().begin() as conn:
                return int(conn.execute(select(func.max(table.c.version))).scalar() or 0)

        return await self._run(go)

    # ------------------------------------------------------------------ runs

    async def put_run(
        self, run_id: str, kind: str, name: str, status: str, data: dict[str, Any]
    ) -> None:
        """Insert or update a run; `created_at` is kept from the first write."""
        table = _schema()[1]["runs"]

        def go() -> None:
            now = time.time()
            values = {"kind": kind, "name": name, "status": status, "data": data, "updated_at": now}
            with self._connect().begin() as conn:
                updated = conn.execute(
                    table.update().where(table.c.id == run_id).values(**values)
                ).rowcount
                if not updated:
                    conn.execute(table.insert().values(id=run_id, created_at=now, **values))

        await self._run(go)

    async def get_run(self, run_id: str) -> RunRecord | None:
        table = _schema()[1]["runs"]

        def go() -> RunRecord | None:
            with self._connect().begin() as conn:
                row = conn.execute(table.select().where(table.c.id == run_id)).mappings().first()
            return RunRecord(**row) if row else None

        return await self._run(go)

    async def list_runs(self, kind: str | None = None, limit: int = 50) -> list[RunRecord]:
        """Newest first."""
        table = _schema()[1]["runs"]

        def go() -> list[RunRecord]:
            query = table.select().order_by(table.c.created_at.desc()).limit(limit)
            if kind is not None:
                query = query.where(table.c.kind == kind)
            with self._connect().begin() as conn:
                return [RunRecord(**row) for row in conn.execute(query).mappings()]

        return await self._run(go)

    # ------------------------------------------------------------------ approvals

    def _expire(self, conn: Connection, now: float) -> None:
        table = _schema()[1]["approvals"]
        conn.execute(
            table.update()
            .where(table.c.status == "pending")
            .where(table.c.expires_at.is_not(None))
            .where(table.c.expires_at <= now)
            .values(status="expired", resolved_at=table.c.expires_at, resolved_by="timeout")
        )

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
        table = _schema()[1]["approvals"]
        approval_id = uuid.uuid4().hex[:12]

        def go() -> None:
            with self._connect().begin() as conn:
                conn.execute(
                    table.insert().values(
                        id=approval_id,
                        run_id=run_id,
                        agent=agent,
                        tool_name=tool_name,
                        args=args,
                        reason=reason,
                        kind=kind,
                        data=data or {},
                        status="pending",
                        created_at=time.time(),
                        expires_at=expires_at,
                    )
                )

        await self._run(go)
        return approval_id

    async def get_approval(self, approval_id: str) -> Approval | None:
        """The approval, reading as `expired` once its deadline has passed."""
        table = _schema()[1]["approvals"]

        def go() -> Approval | None:
            with self._connect().begin() as conn:
                self._expire(conn, time.time())
                row = (
                    conn.execute(table.select().where(table.c.id == approval_id)).mappings().first()
                )
            return Approval(**row) if row else None

        return await self._run(go)

    async def list_approvals(
        self,
        status: ApprovalStatus | None = "pending",
        *,
        agent: str | None = None,
        tool_name: str | None = None,
        limit: int = 200,
    ) -> list[Approval]:
        """Approvals with this status (None: all), newest first."""
        table = _schema()[1]["approvals"]

        def go() -> list[Approval]:
            query = table.select().order_by(table.c.created_at.desc()).limit(limit)
            if status is not None:
                query = query.where(table.c.status == status)
            if agent is not None:
                query = query.where(table.c.agent == agent)
            if tool_name is not None:
                query = query.where(table.c.tool_name == tool_name)
            with self._connect().begin() as conn:
                self._expire(conn, time.time())
                return [Approval(**row) for row in conn.execute(query).mappings()]

        return await self._run(go)

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
        table = _schema()[1]["approvals"]

        def go() -> Approval | None:
            now = time.time()
            with self._connect().begin() as conn:
                self._expire(conn, now)
                row = (
                    conn.execute(table.select().where(table.c.id == approval_id)).mappings().first()
                )
                if row is None:
                    return None
                if row["status"] == "pending":
                    conn.execute(
                        table.update()
                        .where(table.c.id == approval_id)
                        .where(table.c.status == "pending")
                        .values(
                            status="approved" if approved else "denied",
                            resolved_at=now,
                            resolved_by=by,
                            data={**(row["data"] or {}), **(data or {})},
                        )
                    )
                    row = (
                        conn.execute(table.select().where(table.c.id == approval_id))
                        .mappings()
                        .first()
                    )
            return Approval(**row)

        return await self._run(go)

    async def consume_approval(self, approval_id: str) -> bool:
        """Mark an approved approval as used; False if it was not approved or already used.

        This makes one approval allow exactly one call, even when a restarted run and the
        original one both find it.
        """
        table = _schema()[1]["approvals"]

        def go() -> bool:
            with self._connect().begin() as conn:
                result = conn.execute(
                    table.update()
                    .where(table.c.id == approval_id)
                    .where(table.c.status == "approved")
                    .where(table.c.consumed_at.is_(None))
                    .values(consumed_at=time.time())
                )
                return bool(result.rowcount)

        return await self._run(go)

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
        detail, ts). Callers mask secrets before calling: the store writes what it gets."""
        table = _schema()[1]["audit"]
        values = {
            "ts": float(entry.get("ts") or time.time()),
            "run_id": str(entry.get("run_id", "")),
            "agent": str(entry.get("agent", "")),
            "tool": str(entry.get("tool", "")),
            "args": entry.get("args") or {},
            "outcome": str(entry.get("outcome", "")),
            "duration_ms": entry.get("duration_ms"),
            "detail": entry.get("detail"),
        }

        def go() -> None:
            with self._connect().begin() as conn:
                conn.execute(table.insert().values(**values))

        await self._run(go)

    async def list_audit(
        self, limit: int = 100, *, run_id: str | None = None, agent: str | None = None
    ) -> list[AuditEntry]:
        """Newest first."""
        table = _schema()[1]["audit"]

        def go() -> list[AuditEntry]:
            query = table.select().order_by(table.c.id.desc()).limit(limit)
            if run_id is not None:
                query = query.where(table.c.run_id == run_id)
            if agent is not None:
                query = query.where(table.c.agent == agent)
            with self._connect().begin() as conn:
                return [AuditEntry(**row) for row in conn.execute(query).mappings()]

        return await self._run(go)


def get_store(services: Services) -> Store:
    """The process-wide Store for `services.state_url`, created on first use."""
    url = normalize_url(services.state_url, services.root)
    return services.get(f"store:{url}", lambda: Store(url), closer=Store.close)
