"""SQLite's limits inside one statement: no string, blob or row grows past a bound,
printf()/format() refuse widths and precisions past it, and everything SQLite allocates
(values, the row being built, sorts, temporary tables) comes out of one bounded heap.

Its own module because these are SQLite's own mechanisms (`SQLITE_LIMIT_LENGTH`,
`PRAGMA hard_heap_limit` and `temp_store`, SQL functions replaced on every connection the
engine opens): a value's cost must be bounded inside a single opcode, where neither the row
caps (`rows`) nor the statement's deadline (`worker`) can stop it, and what one statement
holds at once is not a row's worth: `max(randomblob(N), randomblob(N), ...)` keeps every
argument, a SELECT of 40 `zeroblob(N)` columns expands each one when the row is read, and
`ORDER BY` over a cross join spills GBs to temporary files in seconds.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from typing import Any

HEAP_LIMIT = 512 * 1024 * 1024
"""Bytes SQLite may hold at once for one statement of a connector (the library's heap is
one per process, so the limit is set in the worker process that runs the statement, one
at a time, never in fim's own). Past it an allocation fails and the statement ends with
"out of memory"; fim's copy of a row is never larger than what SQLite holds (rows are
fetched one at a time), so this bounds both."""


def sqlite_limits(
    conn: Any, max_length: int, read_only: bool = True, heap: int | None = None
) -> None:
    """Bound what one statement on `conn` may cost, before the model's SQL can run (read-only
    connections call this before their authorizer, which would refuse these PRAGMAs).

    No string or blob (nor a row SQLite stores) may exceed `max_length` bytes, LIKE/GLOB
    patterns stay short, and printf()/format() refuse widths and precisions past
    `max_length`: SQLite's `%.*c` keeps looping after the value is too big (0.5 s per 100M,
    inside one opcode that neither the progress handler nor an interrupt can stop).

    A value limit alone does not bound a statement: it can hold any number of values at
    once (function arguments, result columns, accumulators). So SQLite's heap is capped
    at `heap` bytes when given (the PRAGMA holds for the whole process and only ever lowers
    its limit: given only in a worker that runs nothing else). On a `read_only`
    connection temporary tables and sorts are kept in memory (`temp_store = MEMORY`)
    instead of temporary files, which nothing bounds: a sort too big for the heap fails
    at once instead of writing GBs to the disk.
    A writable connection keeps its files: its statements may write the database itself
    without bound (and set `temp_store` back), and `CREATE INDEX` on a large table needs a
    sort bigger than the heap."""

    if heap is not None:
        conn.execute(f"PRAGMA hard_heap_limit = {int(heap)}")
    if read_only:
        conn.execute("PRAGMA temp_store = MEMORY")
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
