"""The static check for SQLite, MySQL and the other dialects, read by sqlglot.

An allowlist over sqlglot's tree: one SELECT / set operation / VALUES (or EXPLAIN of one),
no data-modifying node anywhere in it, no locking clause, no `SELECT ... INTO`, no function
with side effects, only the PRAGMAs that read; comments that hide SQL keywords or optimizer
hints are refused too. An AST shape it did not foresee is a refusal, never a pass.
PostgreSQL is not read here (see `postgres`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fim.connectors.sql_guard.rules import (
    ARGUMENT_PRAGMAS,
    READ_PRAGMAS,
    SqlRejected,
    is_side_effect_function,
)

_KEYWORD_IN_COMMENT = re.compile(
    r"\b(insert|update|delete|merge|upsert|replace|drop|create|alter|truncate|grant|revoke|"
    r"attach|detach|pragma|copy|vacuum|reindex|analyze|set|commit|rollback|begin|"
    r"savepoint|release|lock|call|do|execute|prepare|into)\b",
    re.IGNORECASE,
)
_EXPLAIN_OPTIONS = re.compile(
    r"^\s*(\((?:[^()]*)\)|analy[sz]e\b|verbose\b|query\s+plan\b)\s*", re.IGNORECASE
)


def check_sqlglot(sql: str, dialect: str | None) -> None:
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
        check_sqlglot(rest, dialect)
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
