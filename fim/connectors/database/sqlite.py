"""SQLite's limits inside one statement: no string, blob or row grows past a bound, and
printf()/format() refuse widths and precisions past it.

Its own module because these are SQLite's own mechanisms (`SQLITE_LIMIT_LENGTH`, SQL
functions replaced on every connection the engine opens): a value's cost must be bounded
inside a single opcode, where neither the row caps (`rows`) nor the statement's deadline
(`worker`) can stop it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from typing import Any


def sqlite_limits(conn: Any, max_length: int) -> None:
    """No string or blob (nor row) may exceed `max_length` bytes, LIKE/GLOB patterns stay
    short, and printf()/format() refuse widths and precisions past `max_length`: SQLite's
    `%.*c` keeps looping after the value is too big (0.5 s per 100M, inside one opcode
    that neither the progress handler nor an interrupt can stop)."""

    if hasattr(conn, "setlimit"):  # Python 3.11+
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000)
    guarded = functools.partial(_guarded_printf, max_length)
    for name in ("printf", "format"):
        conn.create_function(name, -1, guarded, deterministic=True)


_PRINTF_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d*)(?:\.(\*|\d*))?[!]?([a-zA-Z%])")


def _guarded_printf(limit: int, fmt: Any, *args: Any) -> Any:
    """SQLite's printf(), after checking every width and precision against `limit`; the
    formatting itself is SQLite's own, on a private in-memory connection."""

    if fmt is None:
        return None
    used = 0
    for match in _PRINTF_SPEC.finditer(str(fmt)):
        if match.group(3) == "%":
            continue
        for part in match.group(1, 2):
            if part == "*":
                size = _as_int(args[used]) if used < len(args) else 0
                used += 1
            else:
                size = int(part) if part else 0
            if abs(size) > limit:
                raise ValueError(f"printf width or precision over {limit}")
        used += 1
    with contextlib.closing(sqlite3.connect(":memory:")) as mem:
        if hasattr(mem, "setlimit"):
            mem.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
        marks = ", ".join("?" * (len(args) + 1))
        return mem.execute(f"SELECT printf({marks})", (fmt, *args)).fetchone()[0]


def _as_int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return 0 if not isinstance(value, float) else 2**31
