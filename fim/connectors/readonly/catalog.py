"""Layer 2 of read-only PostgreSQL: every name a statement uses must be marked safe.

The parser (`fim.connectors.sql_guard`) lists every function, operator and type a statement
names; only the database knows what they resolve to. Each one is looked up in
`pg_proc`/`pg_operator`/`pg_type` and must live in `pg_catalog`/`information_schema`, not be
VOLATILE (a few harmless ones excepted), not SECURITY DEFINER and not from an extension.
"""

from __future__ import annotations

import threading
from typing import Any

from fim.connectors.sql_guard import Name, Parsed, SqlRejected, is_side_effect_function

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

    def knows(self, parsed: Parsed) -> bool:
        """Whether every name `parsed` uses is cached: `check` then needs no connection."""
        with self._lock:
            return all(
                {n[-1] for n in names} <= cache.keys()
                for cache, names in (
                    (self._functions, parsed.functions),
                    (self._operators, parsed.operators),
                    (self._types, parsed.types),
                )
            )

    def check(self, conn: Any, parsed: Parsed) -> None:
        """Raise `SqlRejected` unless every name in `parsed` is safe (`conn`: psycopg; may
        be None when `knows(parsed)`)."""
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
