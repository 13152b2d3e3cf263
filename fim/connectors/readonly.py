"""Read-only databases, decided in one place.

Every site that asks "may this SQL run on a read-only connector?" (the database tools and
meta-tool, the `readonly_guard` hook, workflow `sql` nodes, `fim validate --live`) calls
this module, and the answer is parsed once per SQL text (`decide` is memoised). The layers:

1. **Statement** (`decide`): exactly one read statement, parsed by the database's own
   parser for PostgreSQL (`fim.connectors.sql_guard`); known side-effect and SQL-text
   functions are refused here already, so hooks see the same verdict without a connection.
2. **Catalog** (`PgCatalog`, PostgreSQL): every function, operator and type the statement
   names must be one PostgreSQL itself marks safe: in `pg_catalog`/`information_schema`,
   not VOLATILE (a few harmless ones excepted), not SECURITY DEFINER, not from an
   extension. Looked up in `pg_proc`/`pg_operator`/`pg_type`, cached per engine.
3. **Role** (`role_problems`, PostgreSQL): on the first connect the connector's role must
   not be a superuser nor able to write anything (table, column and sequence privileges,
   CREATE on the database or a schema, the `pg_write_*`/server-file/signal roles).
4. **Connection**: PostgreSQL sessions default to read-only transactions, each query runs
   in a read-only transaction that is rolled back, carry statement/lock/idle timeouts and
   are `DISCARD ALL`-ed when returned to the pool (dropping advisory locks, prepared
   statements and settings); SQLite opens with `mode=ro`, `query_only` and an authorizer
   that allows only reads.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

from fim.connectors.sql_guard import (
    ARGUMENT_PRAGMAS,
    READ_PRAGMAS,
    Name,
    Parsed,
    SqlRejected,
    check_read_only,
    is_side_effect_function,
)

TRUSTED_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
"""Schemas whose functions, operators and types may run on a read-only connector."""
HARMLESS_VOLATILE = frozenset(
    {
        "random",
        "clock_timestamp",
        "timeofday",
        "gen_random_uuid",
        "pg_relation_size",
        "pg_total_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_database_size",
    }
)
"""VOLATILE `pg_catalog` functions that only read (a clock, randomness, file sizes)."""
WRITE_ROLES = (
    "pg_write_all_data",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_read_server_files",
    "pg_signal_backend",
)
"""Predefined roles a read-only connector's role must not be a member of."""
ROLE_HINT = (
    "create a read-only role: CREATE ROLE fim_reader LOGIN PASSWORD '...'; "
    "GRANT CONNECT ON DATABASE {db} TO fim_reader; GRANT USAGE ON SCHEMA public TO fim_reader; "
    "GRANT SELECT ON ALL TABLES IN SCHEMA public TO fim_reader; and put fim_reader in the "
    "connector's url"
)


# --------------------------------------------------------------------------- 1. statement


@dataclass(frozen=True)
class Decision:
    """The static verdict on one SQL text: `refusal` is None when it may run."""

    sql: str
    dialect: str | None
    refusal: str | None
    parsed: Parsed | None = None

    @property
    def allowed(self) -> bool:
        return self.refusal is None

    def require(self) -> Parsed:
        """The parsed statement, or `SqlRejected` with the reason."""
        if self.parsed is None:
            raise SqlRejected(self.refusal or "refused")
        return self.parsed


MAX_SQL_CHARS = 100_000
"""Longer statements are refused before parsing (a read query the model writes is short)."""
_MEMO_CHARS = 20_000
"""Only statements up to this size are memoised, so the memo stays small."""


def decide(sql: str, dialect: str | None) -> Decision:
    """Whether `sql` is one read statement (memoised: the hook, the hook view and the
    connector all ask about the same text, and it is parsed once)."""
    if len(sql) > MAX_SQL_CHARS:
        return Decision(
            sql,
            dialect,
            f"the SQL is {len(sql)} characters long; a read-only database accepts at most "
            f"{MAX_SQL_CHARS}",
        )
    if len(sql) > _MEMO_CHARS:
        return _decide(sql, dialect)
    return _memo(sql, dialect)


def _decide(sql: str, dialect: str | None) -> Decision:
    try:
        return Decision(sql, dialect, None, check_read_only(sql, dialect))
    except SqlRejected as exc:
        return Decision(sql, dialect, str(exc))
    except Exception as exc:  # a parser crash is a refusal, never a pass
        return Decision(
            sql, dialect, f"the statement could not be verified as read-only ({exc!r:.200})"
        )


_memo = functools.lru_cache(maxsize=512)(_decide)


# --------------------------------------------------------------------------- 2. catalog


_FUNCTIONS_SQL = """
SELECT p.proname, n.nspname, p.provolatile::text, p.prosecdef,
       EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
               WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                 AND d.objid = p.oid AND d.deptype = 'e')
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname = ANY(%s)
"""
_OPERATORS_SQL = """
SELECT o.oprname, n.nspname, p.provolatile::text, p.prosecdef,
       EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
               WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                 AND d.objid = p.oid AND d.deptype = 'e'),
       pn.nspname, p.proname
FROM pg_catalog.pg_operator o
JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
JOIN pg_catalog.pg_proc p ON p.oid = o.oprcode
JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace
WHERE o.oprname = ANY(%s)
"""
_TYPES_SQL = """
SELECT t.typname, n.nspname, t.typtype::text
FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE t.typname = ANY(%s)
"""


class PgCatalog:
    """The catalog layer for one engine: which names PostgreSQL marks safe.

    A call is allowed only if *every* catalog entry it could resolve to is safe (all
    overloads, and for an unqualified name all schemas, so a same-named function in
    another schema can never be picked instead). Verdicts are cached per name for the
    engine's lifetime; a changed declaration or a reload builds a new engine.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._functions: dict[str, list[tuple[Any, ...]]] = {}
        self._operators: dict[str, list[tuple[Any, ...]]] = {}
        self._types: dict[str, list[tuple[Any, ...]]] = {}

    def check(self, conn: Any, parsed: Parsed) -> None:
        """Raise `SqlRejected` unless every name in `parsed` is safe (`conn`: psycopg)."""
        self._load(conn, self._functions, _FUNCTIONS_SQL, parsed.functions)
        self._load(conn, self._operators, _OPERATORS_SQL, parsed.operators)
        self._load(conn, self._types, _TYPES_SQL, parsed.types)
        for name in sorted(parsed.functions):
            self._check_function(name)
        for name in sorted(parsed.operators):
            self._check_operator(name)
        for name in sorted(parsed.types):
            self._check_type(name)

    def _load(
        self, conn: Any, cache: dict[str, list[tuple[Any, ...]]], sql: str, names: Any
    ) -> None:
        with self._lock:
            missing = sorted({n[-1] for n in names} - cache.keys())
        if not missing:
            return
        found: dict[str, list[tuple[Any, ...]]] = {n: [] for n in missing}
        for row in conn.execute(sql, (missing,), prepare=False).fetchall():
            found[row[0]].append(tuple(row[1:]))
        with self._lock:
            cache.update(found)

    def _check_function(self, name: Name) -> None:
        shown = ".".join(name) + "()"
        rows = _in_schema(self._functions.get(name[-1], []), name)
        if not rows:
            raise SqlRejected(f"there is no function {shown} in the database")
        for schema, volatility, secdef, extension in rows:
            why = _unsafe(name[-1], schema, volatility, secdef, extension)
            if why:
                raise SqlRejected(
                    f"the function {shown} is not allowed on a read-only database: {why}"
                )

    def _check_operator(self, name: Name) -> None:
        shown = " ".join(name)
        rows = _in_schema(self._operators.get(name[-1], []), name)
        if not rows:
            raise SqlRejected(f"there is no operator {shown} in the database")
        for schema, volatility, secdef, extension, func_schema, func in rows:
            why = (
                f"it is defined in schema {schema}"
                if schema not in TRUSTED_SCHEMAS
                else _unsafe(func, func_schema, volatility, secdef, extension)
            )
            if why:
                raise SqlRejected(
                    f"the operator {shown} is not allowed on a read-only database: {why}"
                )

    def _check_type(self, name: Name) -> None:
        shown = ".".join(name)
        rows = _in_schema(self._types.get(name[-1], []), name)
        if not rows:
            raise SqlRejected(f"there is no type {shown} in the database")
        for schema, typtype in rows:
            # composite (table row) and enum types convert with built-in functions;
            # domains, ranges and base types outside pg_catalog may run the owner's code
            if schema not in TRUSTED_SCHEMAS and typtype not in ("c", "e"):
                raise SqlRejected(
                    f"casts to the type {shown} (schema {schema}) are not allowed on a "
                    "read-only database; cast to a built-in type"
                )


def _in_schema(rows: list[tuple[Any, ...]], name: Name) -> list[tuple[Any, ...]]:
    return [r for r in rows if r[0] == name[0]] if len(name) == 2 else rows


def _unsafe(func: str, schema: str, volatility: str, secdef: bool, extension: bool) -> str:
    if schema not in TRUSTED_SCHEMAS:
        return (
            f"it is defined in schema {schema}; only functions of "
            f"{' and '.join(sorted(TRUSTED_SCHEMAS))} may run"
        )
    if extension:
        return "it belongs to an extension"
    if secdef:
        return "it runs with its owner's privileges (SECURITY DEFINER)"
    if is_side_effect_function(func):
        return "it has side effects or runs SQL given as text"
    if volatility == "v" and func not in HARMLESS_VOLATILE:
        return "PostgreSQL marks it VOLATILE (it may change state)"
    return ""


# --------------------------------------------------------------------------- 3. role

_ROLE_SQL = """
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolcreatedb, pg_catalog.current_database(),
  pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE'),
  ARRAY(SELECT g.rolname::text FROM pg_catalog.pg_roles g
        WHERE g.rolname = ANY(%(roles)s) AND pg_catalog.pg_has_role(r.oid, g.oid, 'MEMBER')
        ORDER BY 1),
  ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_namespace n
        WHERE n.nspname <> ALL(%(system)s) AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE')
        ORDER BY 1 LIMIT 3),
  ARRAY(SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname)
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname <> ALL(%(system)s) AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND ((c.relkind IN ('r', 'p', 'v', 'm', 'f')
                AND (pg_catalog.has_table_privilege(r.oid, c.oid,
                       'INSERT, UPDATE, DELETE, TRUNCATE')
                     OR pg_catalog.has_any_column_privilege(r.oid, c.oid, 'INSERT, UPDATE')))
               OR (c.relkind = 'S'
                   AND pg_catalog.has_sequence_privilege(r.oid, c.oid, 'USAGE, UPDATE')))
        ORDER BY 1 LIMIT 3)
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
"""


class ReadOnlyRoleError(RuntimeError):
    """A read-only PostgreSQL connector whose role could write: it is not used at all."""


def role_problems(conn: Any) -> tuple[str, str, list[str]]:
    """(role, database, what the role could do that a reader must not); `conn` is psycopg."""
    row = conn.execute(
        _ROLE_SQL, {"roles": list(WRITE_ROLES), "system": sorted(TRUSTED_SCHEMAS)}
    ).fetchone()
    if row is None:
        return "?", "?", ["its role could not be found in pg_roles"]
    role, superuser, createrole, createdb, database, create_db, roles, schemas, rels = row
    if superuser:  # a superuser is a member of everything: one reason is enough
        return role, database, ["is a superuser"]
    problems: list[str] = []
    if createrole:
        problems.append("has CREATEROLE")
    if createdb:
        problems.append("has CREATEDB")
    if roles:
        problems.append(f"is a member of {', '.join(roles)}")
    if create_db:
        problems.append(f"has CREATE on database {database}")
    if schemas:
        problems.append(f"has CREATE on schema {', '.join(schemas)}")
    if rels:
        problems.append(f"can write to {', '.join(rels)}")
    return role, database, problems


def role_error(connector: str, role: str, database: str, problems: list[str]) -> str:
    """The one line that says what is wrong with the role and how to make a reader."""
    return (
        f"read-only connector '{connector}' connects as role '{role}', which "
        f"{'; '.join(problems)}, so read-only would rest on the SQL parser alone; "
        f"{ROLE_HINT.format(db=database)}"
    )


# --------------------------------------------------------------------------- 4. connection


def pg_options(statement_timeout: float, read_only: bool) -> str:
    """Session defaults for every pooled PostgreSQL connection (libpq `options`); they
    survive `DISCARD ALL`, which resets to these values."""
    ms = max(1, int(statement_timeout * 1000))
    settings = {
        "statement_timeout": ms,
        "lock_timeout": min(ms, 5000),
        "idle_in_transaction_session_timeout": ms + 10_000,
        "standard_conforming_strings": "on",
    }
    if read_only:
        settings["default_transaction_read_only"] = "on"
    return " ".join(f"-c {k}={v}" for k, v in settings.items())


def install_pg_pool_reset(engine: Any) -> None:
    """Reset every connection returned to the pool with `DISCARD ALL`: advisory locks,
    prepared statements, temp tables and SET values of one query never reach the next."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import event

    def reset(dbapi_conn: Any, record: Any, state: Any) -> None:
        dbapi_conn.rollback()
        if getattr(state, "terminate_only", False):
            return
        dbapi_conn.autocommit = True
        try:
            dbapi_conn.execute("DISCARD ALL")
        finally:
            dbapi_conn.autocommit = False

    event.listen(engine, "reset", reset)


def begin_read_only(conn: Any) -> None:
    """Start the query's transaction read-only. A snapshot is taken at once, so
    `SET TRANSACTION READ WRITE` ("must be set before any query") can no longer undo it."""
    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
    conn.exec_driver_sql("SELECT 1")


def sqlite_read_authorizer(
    action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
) -> int:
    """SQLite asks this for every operation a statement compiles to: only reads pass, so
    ATTACH (which `mode=ro` alone would allow) and every write are denied at compile time."""

    if action in _sqlite_read_actions():
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and arg2 and not is_side_effect_function(arg2):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1:
        name = arg1.lower()
        if name in ARGUMENT_PRAGMAS or (arg2 is None and name in READ_PRAGMAS):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


@functools.cache
def _sqlite_read_actions() -> frozenset[int]:
    names = ("SQLITE_READ", "SQLITE_SELECT", "SQLITE_RECURSIVE", "SQLITE_TRANSACTION")
    return frozenset(getattr(sqlite3, n) for n in names if hasattr(sqlite3, n))


def open_sqlite_read_only(target: str) -> Any:
    """A SQLite connection that cannot write: `mode=ro`, `query_only`, the authorizer."""

    sep = "&" if "?" in target else "?"
    conn = sqlite3.connect(f"{target}{sep}mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    conn.set_authorizer(sqlite_read_authorizer)
    return conn


__all__ = [
    "HARMLESS_VOLATILE",
    "MAX_SQL_CHARS",
    "ROLE_HINT",
    "TRUSTED_SCHEMAS",
    "WRITE_ROLES",
    "Decision",
    "PgCatalog",
    "ReadOnlyRoleError",
    "begin_read_only",
    "decide",
    "install_pg_pool_reset",
    "open_sqlite_read_only",
    "pg_options",
    "role_error",
    "role_problems",
    "sqlite_read_authorizer",
]
