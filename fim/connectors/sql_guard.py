"""The parser half of read-only databases: only one plain read statement passes.

This is the static layer of `fim.connectors.readonly` (which also consults the database
catalog and the connection's own limits), so the rules here are an allowlist, not a
blocklist: the statement must parse, be exactly one statement, be a SELECT / set operation
/ VALUES (or EXPLAIN of one, or PostgreSQL SHOW), and contain no data-modifying node, no
locking clause, no `SELECT ... INTO` and no function known to have side effects. Anything
the parser does not understand is refused rather than guessed at.

PostgreSQL statements are read by PostgreSQL's own parser (libpg_query, through `pglast`),
so `U&"..."` escapes, quoting, case folding, dollar quoting and comments mean exactly what
the server will take them to mean; the result lists every function, operator and type the
statement names, for the catalog check. Other dialects go through sqlglot.
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass
from typing import Any

_DIALECTS = {
    "sqlite": "sqlite",
    "postgresql": "postgres",
    "postgres": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "mssql": "tsql",
    "oracle": "oracle",
    "duckdb": "duckdb",
    "snowflake": "snowflake",
    "bigquery": "bigquery",
}

_SIDE_EFFECT_FUNCTIONS = frozenset(
    {
        # PostgreSQL: server control, sequences, settings, large objects, files, notify
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_promote",
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_export_snapshot",
        "pg_log_backend_memory_contexts",
        "currval",
        "lastval",
        "set_config",
        "nextval",
        "setval",
        "txid_current",
        "pg_current_xact_id",
        "pg_notify",
        "lo_import",
        "lo_export",
        "lo_unlink",
        "lo_create",
        "lo_creat",
        "lo_put",
        "lo_from_bytea",
        "lowrite",
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "query_to_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "ts_stat",
        "ts_rewrite",
        "pg_import_system_collations",
        # SQLite: extension loading and the CLI's file functions
        "load_extension",
        "writefile",
        "readfile",
        "edit",
        "fts3_tokenizer",
        # MySQL
        "sleep",
        "benchmark",
        "get_lock",
        "release_lock",
        "load_file",
    }
)
_SIDE_EFFECT_PREFIXES = (
    "dblink",
    "lo_",
    "pg_advisory",
    "pg_try_advisory",
    "pg_stat_reset",
    "pg_replication",
    "pg_logical",
    "pg_create",
    "pg_drop",
    "pg_switch",
    "pg_file",
    "pg_read",
    "pg_ls_",
    "pg_stat_file",
    "pg_backup",
    "pg_start_backup",
    "pg_stop_backup",
    "pg_wal_replay",
    "pg_copy",
    "pg_terminate",
    "pg_cancel",
    "pg_sleep",
    "table_to_xml",
    "schema_to_xml",
    "database_to_xml",
    "query_to_xml",
)

READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "database_list",
        "collation_list",
        "function_list",
        "module_list",
        "pragma_list",
        "compile_options",
        "user_version",
        "schema_version",
        "application_id",
        "page_count",
        "page_size",
        "encoding",
        "freelist_count",
        "journal_mode",
        "read_uncommitted",
        "integrity_check",
        "quick_check",
        "foreign_key_check",
    }
)
"""PRAGMAs that only read when given no value."""
ARGUMENT_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
    }
)
"""PRAGMAs whose argument names a table or limit rather than a new value."""

_KEYWORD_IN_COMMENT = re.compile(
    r"\b(insert|update|delete|merge|upsert|replace|drop|create|alter|truncate|grant|revoke|"
    r"attach|detach|pragma|copy|vacuum|reindex|analyze|set|commit|rollback|begin|"
    r"savepoint|release|lock|call|do|execute|prepare|into)\b",
    re.IGNORECASE,
)
_EXPLAIN_OPTIONS = re.compile(
    r"^\s*(\((?:[^()]*)\)|analy[sz]e\b|verbose\b|query\s+plan\b)\s*", re.IGNORECASE
)


class SqlRejected(ValueError):
    """A statement the read-only guard refuses; the message is written for the model."""


Name = tuple[str, ...]
"""A possibly schema-qualified name exactly as the parser resolved it (`('pg_catalog',
'lower')`, or `('lower',)`): unquoted parts case-folded, quoted parts and U& escapes
decoded."""


@dataclass(frozen=True)
class Parsed:
    """What the static check learnt about an accepted statement."""

    sql: str
    """The text to execute. For PostgreSQL, `:name` placeholders are rewritten to `$n`
    and this exact text is what was parsed, so what runs is what was checked."""
    params: tuple[str, ...] = ()
    """Placeholder names in `$1, $2, ...` order (PostgreSQL)."""
    kind: str = "select"
    functions: frozenset[Name] = frozenset()
    operators: frozenset[Name] = frozenset()
    types: frozenset[Name] = frozenset()


def dialect_for(url: str) -> str | None:
    """The sqlglot dialect of a SQLAlchemy URL (`postgresql+psycopg://` -> `postgres`)."""
    backend = url.split(":", 1)[0].split("+", 1)[0].lower()
    return _DIALECTS.get(backend)


def check_read_only(sql: str, dialect: str | None = None) -> Parsed:
    """Raise `SqlRejected` unless `sql` is exactly one read-only statement."""
    if dialect == "postgres":
        return _check_postgres(sql)
    _check_sqlglot(sql, dialect)
    return Parsed(sql)


def _check_sqlglot(sql: str, dialect: str | None) -> None:
    # deferred: loading sqlglot costs hundreds of ms
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    if not sql or not sql.strip():
        raise SqlRejected("the SQL is empty; send one SELECT statement")
    # sqlglot logs a warning for every statement it can only parse as an opaque Command.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        tokens = sqlglot.tokenize(sql, read=dialect)
        _check_comments(tokens)
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (ParseError, TokenError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SqlRejected(
            f"the SQL could not be parsed ({first}); this database is read-only and accepts "
            "one plain SELECT statement"
        ) from None
    if len(statements) != 1:
        raise SqlRejected(
            f"found {len(statements)} statements; send exactly one SELECT statement "
            "(no ';'-separated batches)"
        )
    keyword = tokens[0].text.upper() if tokens else "?"
    try:
        _check_statement(statements[0], keyword, dialect, exp)
    except SqlRejected:
        raise
    except Exception as exc:  # an AST shape we did not foresee: refuse, never guess
        raise SqlRejected(
            f"the statement could not be verified as read-only ({type(exc).__name__}); send "
            "one plain SELECT statement"
        ) from None


def is_side_effect_function(name: str) -> bool:
    """True for functions that write, signal, sleep the server or touch its files."""
    lowered = name.lower()
    return lowered in _SIDE_EFFECT_FUNCTIONS or lowered.startswith(_SIDE_EFFECT_PREFIXES)


def _check_comments(tokens: list[Any]) -> None:
    for token in tokens:
        for comment in token.comments or ():
            text = comment.strip()
            if text.startswith(("!", "+")) or _KEYWORD_IN_COMMENT.search(text):
                raise SqlRejected(
                    "comments containing SQL keywords or optimizer hints are not allowed on a "
                    "read-only database; remove the comment and send one SELECT statement"
                )


def _check_statement(statement: Any, keyword: str, dialect: str | None, exp: Any) -> None:
    if isinstance(statement, exp.Command):
        _check_command(statement, dialect)
        return
    if isinstance(statement, exp.Pragma):
        _check_pragma(statement, exp)
        return
    if not isinstance(statement, exp.Select | exp.SetOperation | exp.Values):
        raise SqlRejected(
            f"{keyword} statements are not allowed: this database is read-only. Only SELECT "
            "(optionally WITH ... SELECT), EXPLAIN and SHOW are accepted"
        )
    forbidden = (
        exp.Insert,
        exp.Update,
        exp.Delete,
        exp.Merge,
        exp.Create,
        exp.Drop,
        exp.Alter,
        exp.TruncateTable,
        exp.Copy,
        exp.Command,
        exp.Set,
        exp.Transaction,
        exp.Commit,
        exp.Rollback,
        exp.Grant,
        exp.Attach,
        exp.Detach,
        exp.Pragma,
    )
    for node in statement.walk():
        if isinstance(node, forbidden):
            raise SqlRejected(
                f"the query contains a {type(node).__name__.upper()} (e.g. inside a WITH "
                "clause); this database is read-only, so only reads are allowed"
            )
        if isinstance(node, exp.Into):
            raise SqlRejected(
                "SELECT ... INTO creates a table and is not allowed on a read-only database; "
                "drop the INTO clause"
            )
        if isinstance(node, exp.Lock):
            raise SqlRejected(
                "locking clauses (FOR UPDATE / FOR SHARE) are not allowed on a read-only "
                "database; drop the clause"
            )
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if is_side_effect_function(name):
                raise SqlRejected(
                    f"the function {name}() has side effects and is not allowed on a "
                    "read-only database"
                )


def _check_command(statement: Any, dialect: str | None) -> None:
    keyword = str(statement.this).upper()
    expression = statement.expression
    rest = str(getattr(expression, "this", expression) or "").strip()
    if keyword == "EXPLAIN":
        while True:
            match = _EXPLAIN_OPTIONS.match(rest)
            if not match or not match.group(0).strip():
                break
            rest = rest[match.end() :]
        if not rest:
            raise SqlRejected("EXPLAIN needs a statement; send EXPLAIN SELECT ...")
        _check_sqlglot(rest, dialect)
        return
    if keyword == "SHOW" and dialect == "postgres" and re.fullmatch(r"[\w.]+", rest):
        return
    raise SqlRejected(
        f"{keyword} statements are not allowed: this database is read-only. Only SELECT "
        "(optionally WITH ... SELECT), EXPLAIN and SHOW are accepted"
    )


def _check_pragma(statement: Any, exp: Any) -> None:
    inner = statement.this
    # sqlglot reads both `PRAGMA x = v` and `PRAGMA x(v)` as EQ; SQLite treats both as a
    # write for every pragma except the introspection ones that take a table name.
    has_argument = isinstance(inner, exp.EQ)
    target = inner.this if has_argument else inner
    name = (target.name if target is not None else "").lower()
    allowed = ARGUMENT_PRAGMAS if has_argument else READ_PRAGMAS
    if name not in allowed:
        raise SqlRejected(
            f"PRAGMA {name or '?'}{' with a value' if has_argument else ''} is not allowed on a "
            f"read-only database (it may change settings); allowed: PRAGMA "
            f"{', '.join(sorted(ARGUMENT_PRAGMAS))} (table) and PRAGMA "
            f"{', '.join(sorted(READ_PRAGMAS - ARGUMENT_PRAGMAS))}"
        )


# --------------------------------------------------------------------------- PostgreSQL

_PG_ALLOWED_NODES = frozenset(
    str.split("""
    RawStmt SelectStmt ExplainStmt VariableShowStmt DefElem ResTarget ColumnRef A_Star
    A_Const String Integer Float Boolean BitString A_Expr BoolExpr FuncCall TypeCast TypeName
    RangeVar Alias JoinExpr RangeSubselect RangeFunction RangeTableSample RangeTableFunc
    RangeTableFuncCol SubLink CaseExpr CaseWhen CoalesceExpr MinMaxExpr NullTest BooleanTest
    SortBy WindowDef WithClause CommonTableExpr CTESearchClause CTECycleClause A_Indirection
    A_Indices A_ArrayExpr RowExpr ParamRef SQLValueFunction CollateClause GroupingSet
    GroupingFunc XmlExpr XmlSerialize ColumnDef JsonValueExpr JsonFormat JsonOutput
    JsonReturning JsonKeyValue JsonObjectConstructor JsonArrayConstructor
    JsonArrayQueryConstructor JsonAggConstructor JsonObjectAgg JsonArrayAgg JsonIsPredicate
    JsonFuncExpr JsonArgument JsonBehavior JsonParseExpr JsonScalarExpr JsonSerializeExpr
    JsonTable JsonTablePathSpec JsonTableColumn
    """)
)
"""Raw parse-tree nodes a read statement is made of; any other node is refused."""
_PG_WRITES = {
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE",
}
_PG_BETWEEN = frozenset({"BETWEEN", "NOT BETWEEN", "BETWEEN SYMMETRIC", "NOT BETWEEN SYMMETRIC"})
_PG_SAMPLE_METHODS = frozenset({"system", "bernoulli"})
_PLACEHOLDER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _check_postgres(sql: str) -> Parsed:
    """PostgreSQL's own parser decides what the statement is (see the module docstring)."""
    if not sql or not sql.strip():
        raise SqlRejected("the SQL is empty; send one SELECT statement")
    try:
        # deferred: optional dependency, absent in some installs
        from pglast import ast, parse_sql
        from pglast.parser import ParseError
    except ImportError:  # fail closed: no parser, no read-only PostgreSQL
        raise SqlRejected(
            "read-only PostgreSQL connectors need the pglast parser, which is not installed "
            "(pip install 'fim[postgres]')"
        ) from None
    text, params = _pg_placeholders(sql)
    try:
        statements = parse_sql(text)
    except ParseError as exc:
        raise SqlRejected(
            f"the SQL could not be parsed ({exc}); this database is read-only and accepts one "
            "plain SELECT statement"
        ) from None
    if len(statements) != 1:
        raise SqlRejected(
            f"found {len(statements)} statements; send exactly one SELECT statement "
            "(no ';'-separated batches)"
        )
    stmt = statements[0].stmt
    keyword = _pg_keyword(text)
    if isinstance(stmt, ast.ExplainStmt):
        if not isinstance(stmt.query, ast.SelectStmt):
            inner = _PG_WRITES.get(type(stmt.query).__name__, type(stmt.query).__name__)
            raise SqlRejected(
                f"EXPLAIN is only allowed for SELECT statements, not {inner}; this database "
                "is read-only"
            )
        kind = "explain"
    elif isinstance(stmt, ast.VariableShowStmt):
        kind = "show"
    elif isinstance(stmt, ast.SelectStmt):
        kind = "select"
    else:
        raise SqlRejected(
            f"{keyword} statements are not allowed: this database is read-only. Only SELECT "
            "(optionally WITH ... SELECT), EXPLAIN and SHOW are accepted"
        )
    functions: set[Name] = set()
    operators: set[Name] = set()
    types: set[Name] = set()
    for node in _pg_walk(statements[0], ast.Node):
        name = type(node).__name__
        if name in _PG_WRITES:
            raise SqlRejected(
                f"the query contains a {_PG_WRITES[name]} (e.g. inside a WITH clause); this "
                "database is read-only, so only reads are allowed"
            )
        if name == "IntoClause":
            raise SqlRejected(
                "SELECT ... INTO creates a table and is not allowed on a read-only database; "
                "drop the INTO clause"
            )
        if name == "LockingClause":
            raise SqlRejected(
                "locking clauses (FOR UPDATE / FOR SHARE) are not allowed on a read-only "
                "database; drop the clause"
            )
        if name not in _PG_ALLOWED_NODES:
            raise SqlRejected(
                f"the statement uses {name}, which the read-only guard does not know, so it is "
                "refused; send one plain SELECT statement"
            )
        if isinstance(node, ast.FuncCall):
            func = _pg_name(node.funcname)
            if is_side_effect_function(func[-1]):
                raise SqlRejected(
                    f"the function {'.'.join(func)}() has side effects or runs SQL given as "
                    "text, so it is not allowed on a read-only database"
                )
            functions.add(func)
        elif isinstance(node, ast.A_Expr):
            op = _pg_name(node.name)
            if op[-1].upper() in _PG_BETWEEN:
                operators.update({("<=",), (">=",)})
            else:
                operators.add(op)
        elif isinstance(node, ast.SubLink) and node.operName:
            operators.add(_pg_name(node.operName))
        elif isinstance(node, ast.SortBy) and node.useOp:
            operators.add(_pg_name(node.useOp))
        elif isinstance(node, ast.TypeName):
            if node.pct_type or not node.names:
                raise SqlRejected("%TYPE references are not allowed; name the type")
            types.add(_pg_name(node.names))
        elif isinstance(node, ast.RangeTableSample):
            method = _pg_name(node.method)
            if len(method) != 1 or method[0] not in _PG_SAMPLE_METHODS:
                raise SqlRejected("TABLESAMPLE accepts only the SYSTEM and BERNOULLI methods")
    return Parsed(text, params, kind, frozenset(functions), frozenset(operators), frozenset(types))


def _pg_placeholders(sql: str) -> tuple[str, tuple[str, ...]]:
    """Rewrite `:name` placeholders (outside strings, identifiers and comments, found by
    PostgreSQL's own scanner) to `$1`, `$2`...; the rewritten text is what gets parsed and
    run, so a placeholder can never change what the statement means unnoticed."""
    # deferred: loading pglast costs tens of ms
    from pglast.parser import ParseError, scan

    try:
        tokens = list(scan(sql))
    except ParseError:
        return sql, ()  # the parse that follows reports the error
    names: list[str] = []
    pieces: list[str] = []
    last = 0
    for colon, word in itertools.pairwise(tokens):
        if colon.name != "ASCII_58" or word.start != colon.end + 1:
            continue
        before = sql[colon.start - 1] if colon.start else " "
        name = sql[word.start : word.end + 1]
        if before.isalnum() or before in "_:$\\" or not _PLACEHOLDER.match(name):
            continue
        if name not in names:
            names.append(name)
        pieces += [sql[last : colon.start], f"${names.index(name) + 1}"]
        last = word.end + 1
    if not names:
        return sql, ()
    return "".join(pieces) + sql[last:], tuple(names)


def _pg_keyword(sql: str) -> str:
    """The statement's first word, for messages (comments and parentheses skipped)."""
    # deferred: loading pglast costs tens of ms
    from pglast.parser import scan

    for token in scan(sql):
        if token.name not in ("SQL_COMMENT", "C_COMMENT", "ASCII_40"):
            return sql[token.start : token.end + 1].upper()
    return "?"


def _pg_name(parts: Any) -> Name:
    names = tuple(getattr(p, "sval", None) for p in parts or ())
    if not names or any(not isinstance(n, str) for n in names) or len(names) > 2:
        raise SqlRejected("a function, operator or type name could not be read; refused")
    return names  # type: ignore[return-value]


def _pg_walk(node: Any, node_type: type[Any]) -> Any:
    """Every parse-tree node below (and including) `node`, depth first."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple | list):
            stack.extend(item)
        elif isinstance(item, node_type):
            yield item
            stack.extend(getattr(item, attr, None) for attr in type(item).__slots__)


__all__ = [
    "ARGUMENT_PRAGMAS",
    "READ_PRAGMAS",
    "Name",
    "Parsed",
    "SqlRejected",
    "check_read_only",
    "dialect_for",
    "is_side_effect_function",
]
