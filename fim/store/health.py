"""Whether the state store can serve: checked at start, probed while serving, inspected for
`fim store migrate --check`.

A wrong or unreachable store, or a PostgreSQL role without the privileges fim needs, used to
pass start-up and `/healthz` and then fail every run with a traceback (newcomer7 #2). Here:

- `open_or_fail`: `fim serve` and `fim worker` open (and migrate) the store at start and
  read every fim table; a failure is one `RunError` naming the store (password masked) with
  a hint for what is wrong (a GRANT, `fim store migrate` as the owner, the host and port);
- `store_failure`: whether an exception a request met is the store's (connection, login,
  privileges), and its one line, so the server answers 503 `store_unavailable` instead of a
  500 and a traceback;
- `StoreProbe`: `SELECT 1`, remembered a few seconds, for `GET /readyz` and `/v1/status`;
- `inspect`: what a store lacks (tables, migrations) and what the role may not do, read
  only, for `fim store migrate --check` and `fim validate --live`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.store.schema import MIGRATIONS, schema, sqlite_file

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.store.engine import Database

log = logging.getLogger("fim.store")

PROBE_EVERY = 5.0
"""Seconds a `StoreProbe` answer is reused: a readiness probe every second costs the
database one query per five seconds per process."""

PROBE_TIMEOUT = 3.0
"""Seconds a probe waits for the store: a database that does not answer (a firewall that
drops packets) is not ready, and the probe must answer before the orchestrator's own
timeout (Kubernetes: 1 s by default, so a probe of a hung store answers 503 on the next)."""

DML = ("SELECT", "INSERT", "UPDATE", "DELETE")
"""What fim does to each of its tables at run time."""

_STORE_SQLSTATES = ("08", "28", "3D", "42501", "53", "57", "58")
"""SQLSTATEs of a store that cannot serve rather than of a wrong statement: connection (08),
login (28), database (3D), privileges (42501), resources (53), shutdown (57), system (58)."""


# --------------------------------------------------------------------------- failures


def store_failure(exc: BaseException) -> str | None:
    """The first line of `exc` when it (or what caused it) is the store failing to serve
    (unreachable, login refused, privileges, shut down; SQLite: locked, read-only, I/O),
    else None: a wrong statement is fim's bug, reported as such."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_store_failure(current):
            return _first_line(current)
        current = current.__cause__ or current.__context__
    return None


def _is_store_failure(exc: BaseException) -> bool:
    module = type(exc).__module__
    if module.startswith("psycopg_pool"):  # PoolTimeout: no connection could be made
        return True
    if not module.startswith(("sqlalchemy", "psycopg", "sqlite3")):
        return False
    name = type(exc).__name__
    if name in ("OperationalError", "InterfaceError"):
        return True
    state = getattr(getattr(exc, "orig", exc), "sqlstate", None) or ""
    return state.startswith(_STORE_SQLSTATES)


def _first_line(exc: BaseException) -> str:
    """The driver's message without SQLAlchemy's wrapping (`(psycopg.X) ...`, the SQL, the
    background link) or libpq's second line."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line.removeprefix("connection failed: ")


def hint_for(message: str, role: str | None) -> str:
    """What to do about a store failure, by its message."""
    lowered = message.lower()
    who = role or "<role>"
    if "permission denied for schema" in lowered:
        return (
            f"GRANT CREATE ON SCHEMA public TO {who}, or run `fim store migrate` as the "
            "schema's owner first (PostgreSQL 15 and later give no one CREATE on public)"
        )
    if "permission denied" in lowered or "must be owner" in lowered:
        return (
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {who} and "
            f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {who}, as the "
            "tables' owner (docs/scale-out.md)"
        )
    if "password" in lowered or "authentication" in lowered or "role" in lowered:
        return "check the user and password of `state:` in fim.yaml (or FIM_STATE_URL)"
    if "does not exist" in lowered and "database" in lowered:
        return "create the database (CREATE DATABASE ...), or fix its name in `state:`"
    if "readonly" in lowered or "read-only" in lowered or "unable to open" in lowered:
        return "the state file's folder must be writable by this process"
    return (
        "check the host and port of `state:` in fim.yaml (or FIM_STATE_URL) and that the "
        "database is up"
    )


def role_of(db: Database) -> str | None:
    """The user the store's URL logs in as (None: SQLite, or the driver's default)."""
    if db.is_sqlite:
        return None
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy.engine import make_url

    return make_url(db.url).username


def start_error(db: Database, message: str) -> RunError:
    """One line naming the store (password masked) and what to do."""
    return RunError(f"state store {db.display_url}: {message}", hint=hint_for(message, role_of(db)))


# --------------------------------------------------------------------------- at start


def check_at_start(state_url: str, root: Path | None) -> Database:
    """`open_or_fail` on a store of its own, closed again: what `fim serve --workers` and
    `fim worker` do before they start anything. The store, for its URL."""
    # deferred: the engine loads SQLAlchemy, which probes and status never need here
    from fim.store.engine import Database

    db = Database(state_url, root)
    try:
        open_or_fail(db)
    finally:
        db.close()
    return db


def open_or_fail(db: Database) -> None:
    """Open (and migrate) the store and check this role can read and write every fim table;
    a `RunError` with one line otherwise. Blocking: run it in a thread from a loop."""
    try:
        db.open()
        if not db.is_sqlite:
            with db._connect().connect() as conn:
                missing = privilege_problems(conn)
            if missing:
                raise RunError(
                    f"state store {db.display_url}: role {role_of(db) or 'of `state:`'} "
                    f"may not {missing[0]}"
                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
                    hint=hint_for("permission denied", role_of(db)),
                )
    except RunError:
        raise
    except Exception as exc:
        line = store_failure(exc)
        if line is None:
            raise
        raise start_error(db, line) from None


def privilege_problems(conn: Connection) -> list[str]:
    """What the connected PostgreSQL role may not do to fim's tables that exist in its
    schema (`SELECT on fim_runs`, ...), and their sequences."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import text

    rows = conn.execute(
        text(
            "SELECT c.relname, c.relkind, "
            "has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'INSERT'), "
            "has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'), "
            "CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'USAGE') END "
            "FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
            "AND c.relkind IN ('r', 'p', 'S') "
            "AND (c.relname LIKE 'fim\\_%' OR c.relname LIKE 'procrastinate\\_%') "
            "ORDER BY c.relname"
        )
    ).all()
    problems = []
    for name, kind, *granted in rows:
        if kind == "S":
            if not granted[4]:
                problems.append(f"USAGE on sequence {name}")
            continue
        lacking = [what for what, ok in zip(DML, granted[:4], strict=True) if not ok]
        if lacking:
            problems.append(f"{', '.join(lacking)} on {name}")
    return problems


# --------------------------------------------------------------------------- inspection


@dataclass
class Inspection:
    """What `fim store migrate` would do to a store, and what its role may not do there."""

    missing: list[str] = field(default_factory=list)
    """What migrating would create or apply ("fim's tables (schema 9 of 10)", ...)."""
    privileges: list[str] = field(default_factory=list)
    """What the role may not do to a table that exists."""
    notes: list[str] = field(default_factory=list)
    """Neither: worth a line (a database migrated by a newer fim)."""
    can_create: bool = True
    """Whether the role may create tables in its schema (PostgreSQL)."""


def inspect(db: Database) -> Inspection:
    """Read what the store has of fim's own schema, without changing anything. Blocking;
    raises what connecting raises."""
    found = Inspection()
    if db.is_sqlite:
        file = sqlite_file(db.url)
        if file is not None and not file.exists():
            found.missing.append(f"the state file {file} (made at the first start)")
            return found
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import create_engine, text
    from sqlalchemy import inspect as sa_inspect

    engine = create_engine(db.url)  # not the store's engine: that one migrates
    try:
        with engine.connect() as conn:
            names = set(sa_inspect(conn).get_table_names())
            version = 0
            readable = db.is_sqlite or bool(
                conn.execute(
                    text(
                        "SELECT to_regclass('fim_schema_version') IS NULL OR "
                        "has_table_privilege('fim_schema_version', 'SELECT')"
                    )
                ).scalar()
            )
            if "fim_schema_version" in names and readable:
                version = int(
                    conn.execute(text("SELECT max(version) FROM fim_schema_version")).scalar() or 0
                )
            known = len(MIGRATIONS)
            if not readable:  # `privileges` says so; the version cannot be told
                pass
            elif version < known:
                found.missing.append(f"fim's tables (schema version {version} of {known})")
            elif version > known:
                found.notes.append(
                    f"this database was migrated by a newer fim (schema version {version}; "
                    f"this fim knows {known}): a rollback works while the newer migrations "
                    "only added tables or columns"
                )
            if readable and version >= known:  # migrated, yet a table is gone (dropped by hand)
                absent = [t.name for t in schema()[1].values() if t.name not in names]
                if db.is_sqlite:  # one process: no budget holds
                    absent = [name for name in absent if name != "fim_budget_holds"]
                found.missing.extend(f"table {name}" for name in absent)
            if not db.is_sqlite:
                found.can_create = bool(
                    conn.execute(
                        text("SELECT has_schema_privilege(current_schema(), 'CREATE')")
                    ).scalar()
                )
                found.privileges = privilege_problems(conn)
    finally:
        engine.dispose()
    return found


# --------------------------------------------------------------------------- probe


class StoreProbe:
    """`SELECT 1` on the store, remembered `PROBE_EVERY` seconds: readiness (`/readyz`) and
    `/v1/status` ask as often as they like, the database sees one query per interval. One
    probe runs at a time; a change of state is logged once (the probe's answer over HTTP
    says only what kind of failure it is)."""

    def __init__(
        self,
        store: Callable[[], Any],
        every: float | None = None,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._every = PROBE_EVERY if every is None else every
        self._timeout = PROBE_TIMEOUT if timeout is None else timeout
        self._clock = clock
        self._at: float | None = None
        self._answer: tuple[bool, str | None] = (True, None)
        self._running: asyncio.Future[tuple[bool, str | None]] | None = None

    @property
    def last(self) -> dict[str, Any]:
        """The last answer as `/v1/status` shows it (ok until a probe said otherwise)."""
        return {"ok": self._answer[0], "error": self._answer[1]}

    async def state(self) -> tuple[bool, str | None]:
        """(ok, None) or (False, the masked one-line reason)."""
        if self._at is not None and self._clock() - self._at < self._every:
            return self._answer
        if self._running is None:
            self._running = asyncio.ensure_future(self._probe())
        running = self._running
        try:
            return await asyncio.shield(running)
        finally:
            if running.done() and self._running is running:
                self._running = None

    async def _probe(self) -> tuple[bool, str | None]:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import text

        store = self._store()
        answer: tuple[bool, str | None]
        try:
            async with asyncio.timeout(self._timeout):
                await store._read(lambda conn: conn.execute(text("SELECT 1")).scalar())
            answer = (True, None)
        except TimeoutError:
            answer = (False, f"state store {store.display_url}: no answer in {self._timeout:g} s")
        except Exception as exc:
            line = store_failure(exc) or _first_line(exc)
            answer = (False, f"state store {store.display_url}: {line}")
        if answer != self._answer:
            if answer[0]:
                log.warning("the state store answers again")
            else:
                log.error("%s; not ready until it answers", answer[1])
        self._answer, self._at = answer, self._clock()
        return answer


def live_problem(db: Database) -> tuple[str, str] | None:
    """For `fim validate --live`: (message, hint) when the store could not serve this fim as
    it is (unreachable, a table the role may not use, or tables missing that it may not
    create), else None. Changes nothing."""
    try:
        found = inspect(db)
    except Exception as exc:
        line = store_failure(exc)
        if line is None:
            raise
        error = start_error(db, line)
        return error.message, error.hint or ""
    role = role_of(db) or "the role"
    if found.privileges:
        more = f" (and {len(found.privileges) - 1} more)" if len(found.privileges) > 1 else ""
        return (
            f"state store {db.display_url}: {role} may not {found.privileges[0]}{more}",
            hint_for("permission denied", role_of(db)),
        )
    if found.missing and not found.can_create:
        return (
            f"state store {db.display_url}: {found.missing[0]} missing, and {role} may not "
            "create tables",
            hint_for("permission denied for schema", role_of(db)),
        )
    return None
