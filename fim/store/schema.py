"""Where the state store lives (URLs) and what it holds (tables, ordered migrations).

Tables are built on first use so importing fim.store never imports SQLAlchemy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from fim import store_url

if TYPE_CHECKING:
    from sqlalchemy import Connection, MetaData, Table


# --------------------------------------------------------------------------- URLs


def normalize_url(url: str, root: Path | str | None = None) -> str:
    """Make a user's state URL usable by SQLAlchemy.

    Relative SQLite paths are relative to the project root (not the shell's cwd, so
    `fim approvals` from a subfolder finds the same file), and PostgreSQL URLs use the
    psycopg v3 driver, which is the one fim ships with; the scheme is read in any case
    (`fim.store_url`: `PostgreSQL://` too). Any other URL is returned stripped.
    """
    url = store_url.canonical(url)
    if url.startswith("postgresql"):
        return url
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        rest = url[len("sqlite:///") :]
        path, sep, query = rest.partition("?")
        if path and path != ":memory:" and not path.startswith("file:"):
            base = Path(root) if root is not None else Path.cwd()
            absolute = (base / path).resolve()
            return f"sqlite:///{absolute}" + (sep + query if sep else "")
    return url


def sqlite_file(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :].partition("?")[0]
        if path and path != ":memory:" and not path.startswith("file:"):
            return Path(path)
    return None


# --------------------------------------------------------------------------- JSON


def json_text(value: Any) -> str:
    """The JSON columns' serialiser (the engine's `json_serializer`): orjson, because a
    served run writes its trace twice (event rows, the record's data) and `json.dumps`
    took ~0.1 ms of the writer thread for it, orjson ~5 us. Readers use `json.loads`
    either way. An int beyond 64 bits or a type orjson does not know goes to `json.dumps`,
    as before; NaN and infinities become null (json.dumps wrote `NaN`, which is not JSON)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value)


# --------------------------------------------------------------------------- text


def storable(value: str) -> str:
    """`value` as every store's text column can hold it: each NUL (U+0000) and each lone
    surrogate (U+D800..U+DFFF) replaced by U+FFFD. PostgreSQL refuses NUL in text ("text
    fields cannot contain NUL (0x00) bytes"), and neither SQLite nor psycopg can encode a
    lone surrogate ("surrogates not allowed"); much of what fim stores as text comes from a
    model, a provider or a caller: a provider naming its model `gpt\\u0000` (attack-24) or
    `gpt\\ud800` (attack-28, valid JSON that Python's json reads as it is) made every usage
    row fail, so the daily limits never counted those runs. Applied to every bound value of
    the tables' text columns (`_text_types`), lookups too, so a library caller's session
    `s\\x00` is written and found again as the same row, on SQLite as on PostgreSQL. JSON
    columns keep both, escaped (`\\u0000`, `\\ud800`: `json_text`), which SQLite and
    PostgreSQL's `json` type accept.

    It runs on every bound text value: ASCII text (ids, names) costs what the NUL check
    alone cost (`isascii` is O(1)); other text one UTF-8 encode, which fails only on a
    surrogate."""
    if value.isascii():
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate (the only thing UTF-8 refuses)
        return _UNSTORABLE.sub("\ufffd", value)
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""What no store's text column holds: NUL (PostgreSQL) and lone surrogates (any encoder)."""


def _text_types() -> tuple[Any, Any]:
    """(short, long): `String(n)` and `Text` whose bound values go through `storable`."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import String, Text
    from sqlalchemy.types import TypeDecorator

    class Short(TypeDecorator[str]):
        impl = String
        cache_ok = True

        def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
            return storable(value) if isinstance(value, str) else value

    class Long(TypeDecorator[str]):
        impl = Text
        cache_ok = True

        def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
            return storable(value) if isinstance(value, str) else value

    return Short, Long


# --------------------------------------------------------------------------- schema

_SCHEMA: dict[str, Any] = {}


def schema() -> tuple[MetaData, dict[str, Table]]:
    """MetaData and Table objects, built on first use. Every text column is of a type
    that makes what it is given storable (`storable`)."""
    if not _SCHEMA:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import (
            JSON,
            BigInteger,
            Boolean,
            Column,
            Float,
            Index,
            Integer,
            MetaData,
            Table,
        )

        String, Text = _text_types()
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
            "usage": Table(  # one row per agent run: `fim usage`, GET /v1/usage
                "fim_usage",
                meta,
                Column("id", Integer, primary_key=True, autoincrement=True),
                Column("ts", Float, nullable=False),
                Column("day", String(10), nullable=False, index=True),
                Column("run_id", String(64), nullable=False),
                Column("agent", String(200), nullable=False, index=True),
                Column("model", String(200), nullable=False),
                Column("status", String(16), nullable=False),
                Column("calls", Integer, nullable=False),
                Column("prompt_tokens", Integer, nullable=False),
                Column("completion_tokens", Integer, nullable=False),
                Column("cached_tokens", Integer, nullable=False),
                Column("cost", Float),
            ),
            "session_usage": Table(  # one row per run of a session: session budgets
                "fim_session_usage",
                meta,
                Column("id", Integer, primary_key=True, autoincrement=True),
                Column("ts", Float, nullable=False),
                Column("session", String(200), nullable=False, index=True),
                Column("run_id", String(64), nullable=False),
                Column("agent", String(200), nullable=False),
                Column("prompt_tokens", Integer, nullable=False),
                Column("completion_tokens", Integer, nullable=False),
                Column("cached_tokens", Integer, nullable=False),
                Column("cost", Float),
            ),
            "sessions": Table(  # agent conversations, shared by every replica
                "fim_sessions",
                meta,
                Column("id", String(200), primary_key=True),
                Column("owner", String(64), nullable=False),
                Column("messages", JSON, nullable=False),
                Column("updated_at", Float, nullable=False, index=True),
                Column("name", String(200)),  # the caller's name for it (migration 8)
                Index("ix_fim_sessions_owner_updated", "owner", "updated_at"),
            ),
            "run_owners": Table(  # who started a run over HTTP (fim.store.owners)
                "fim_run_owners",
                meta,
                Column("run_id", String(64), primary_key=True),
                Column("owner", String(64), nullable=False, index=True),
            ),
            "a2a_tasks": Table(  # the A2A surface's tasks, per owner (fim.store.tasks)
                "fim_a2a_tasks",
                meta,
                Column("id", String(64), primary_key=True),
                Column("owner", String(64), nullable=False),
                Column("task", JSON, nullable=False),
                Column("updated_at", Float, nullable=False),
                Index("ix_fim_a2a_tasks_owner_updated", "owner", "updated_at"),
            ),
            "run_events": Table(  # every event of a run, as it goes (fim.store.live)
                "fim_run_events",
                meta,
                Column("run_id", String(64), primary_key=True),
                Column("seq", Integer, primary_key=True, autoincrement=False),
                Column("event", JSON, nullable=False),
            ),
            "budget_holds": Table(  # PostgreSQL only: room calls in flight hold (fim.store.holds)
                "fim_budget_holds",
                meta,
                Column("id", BigInteger, primary_key=True, autoincrement=True),
                Column("scope", String(32), nullable=False, index=True),
                Column("call", String(32), nullable=False, index=True),
                Column("tokens", BigInteger, nullable=False),
                Column("cost", Float, nullable=False),
                Column("final", Boolean, nullable=False),
                Column("expires_at", Float, nullable=False),
                Column("run_id", String(64), nullable=True),
            ),
            "deployments": Table(  # the last commit of a --git source that compiled
                "fim_deployments",
                meta,
                Column("source", String(64), primary_key=True),
                Column("commit", String(64), nullable=False),
                Column("updated_at", Float, nullable=False),
            ),
        }
        _SCHEMA["meta"] = meta
        _SCHEMA["tables"] = tables
    return _SCHEMA["meta"], _SCHEMA["tables"]


def table(name: str) -> Table:
    return schema()[1][name]


def keep_newest(conn: Connection, name: str, owner: str, limit: int) -> None:
    """Delete `owner`'s rows of table `name` beyond its `limit` most recently updated
    (sessions, A2A tasks: each owner bounded on its own, so one key's many rows never push
    out another's)."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import select

    rows = table(name)
    mine = rows.c.owner == owner
    cutoff = conn.execute(
        select(rows.c.updated_at)
        .where(mine)
        .order_by(rows.c.updated_at.desc())
        .offset(limit)
        .limit(1)
    ).scalar()
    if cutoff is not None:
        conn.execute(rows.delete().where(mine, rows.c.updated_at <= cutoff))


def _migration_1(conn: Connection) -> None:
    meta, tables = schema()
    meta.create_all(
        conn, tables=[tables[k] for k in ("runs", "approvals", "audit")], checkfirst=True
    )


def _migration_2(conn: Connection) -> None:
    table("sessions").create(conn, checkfirst=True)


def _migration_3(conn: Connection) -> None:
    table("usage").create(conn, checkfirst=True)


def _migration_4(conn: Connection) -> None:
    # a table of its own rather than a column on fim_usage: creating a table is the same
    # statement on SQLite and PostgreSQL, and runs outside a session write nothing here
    table("session_usage").create(conn, checkfirst=True)


def _migration_5(conn: Connection) -> None:
    table("run_events").create(conn, checkfirst=True)


def _migration_6(conn: Connection) -> None:
    # a table, not a column on fim_runs: the same statement on both databases, and the
    # run record's many writers (engines, workers, the event log) stay as they are
    table("run_owners").create(conn, checkfirst=True)


def _migration_7(conn: Connection) -> None:
    # each owner's sessions are bounded on their own (fim.store.sessions): pruned along this
    for index in table("sessions").indexes:
        if index.name == "ix_fim_sessions_owner_updated":
            index.create(conn, checkfirst=True)


def _migration_8(conn: Connection) -> None:
    # the name a caller gave a session, kept beside the id its key derives from it, so
    # GET /v1/sessions can list a caller's sessions by their names
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import inspect, text

    if "name" not in {c["name"] for c in inspect(conn).get_columns("fim_sessions")}:
        conn.execute(text("ALTER TABLE fim_sessions ADD COLUMN name VARCHAR(200)"))


def _migration_9(conn: Connection) -> None:
    # A2A tasks in the store, so any replica answers `tasks/get` and a restart loses none
    table("a2a_tasks").create(conn, checkfirst=True)


def _migration_10(conn: Connection) -> None:
    # the budget holds, once made on first use by whichever process took the first hold:
    # a role with only DML then failed every run after a YAML change added a daily limit
    # (newcomer7 #3). A table that first use already made is kept (`checkfirst`). SQLite
    # is one process, which never takes holds.
    if conn.dialect.name == "postgresql":
        table("budget_holds").create(conn, checkfirst=True)


def _migration_11(conn: Connection) -> None:
    # the last commit of each `--git` source that compiled, so a fresh replica can serve it
    # while the ref's HEAD is rejected (`fim serve --git-fallback last-good`, newcomer52 #4)
    table("deployments").create(conn, checkfirst=True)


MIGRATIONS: list[Callable[[Connection], None]] = [
    _migration_1,
    _migration_2,
    _migration_3,
    _migration_4,
    _migration_5,
    _migration_6,
    _migration_7,
    _migration_8,
    _migration_9,
    _migration_10,
    _migration_11,
]
"""Applied in order; migration N brings the schema to version N. Append, never edit."""
