"""The static check for PostgreSQL, read by PostgreSQL's own parser (libpg_query via pglast).

`U&"..."` escapes, quoting, case folding, dollar quoting and comments mean exactly what the
server will take them to mean. Every node of the raw parse tree must be one a read statement
is made of, and the accepted statement lists every function, operator and type it names,
for the catalog check of `fim.connectors.readonly`. `:name` placeholders are rewritten to
`$n` before parsing, so the text that runs is the text that was checked.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from fim.connectors.sql_guard.rules import Name, Parsed, SqlRejected, is_side_effect_function

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


def check_postgres(sql: str) -> Parsed:
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
    return Parsed(
        text,
        params,
        kind,
        frozenset(functions),
        frozenset(operators),
        frozenset(types),
        _statement_text(text, statements[0]),
    )


def _statement_text(text: str, raw: Any) -> str:
    """The statement's own text, or "" when it is all of `text`: PostgreSQL reports where
    it starts and how long it is, in bytes of the UTF-8 text (a length of 0: to the end)."""
    start = raw.stmt_location or 0
    if not start and not raw.stmt_len:
        return ""
    data = text.encode("utf-8")
    end = start + raw.stmt_len if raw.stmt_len else len(data)
    return data[start:end].decode("utf-8")


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
