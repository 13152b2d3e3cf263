"""A query's result while it is read: every value and the whole result capped, the row
limit and the client-side deadline checked row by row.

Its own module because what a result may cost (`max_rows`, `max_value_bytes`,
`max_result_bytes`, `statement_timeout`, and `size_limit`, what the database itself may
build or send) is one policy, shared by the SQLAlchemy fetch loop, the PostgreSQL stream,
the PostgreSQL loaders that cut values in libpq's buffer and SQLite's value limit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fim.config.schema import DatabaseConnector


def size_limit(decl: DatabaseConnector) -> int:
    """The most bytes the database itself may build into one value (SQLite's
    `SQLITE_LIMIT_LENGTH`) or send in one row of a SELECT (PostgreSQL, see
    `postgres.bounded_select`): 4 x `max_result_bytes`, so a value or a row somewhat over
    the result cap is still read and shown cut rather than failing the query."""
    return 4 * decl.max_result_bytes


class Truncated(str):
    """A value cut at the per-value byte cap; the text says so, `size` is the original."""

    size: int

    @classmethod
    def of(cls, head: str, size: int, cap: int) -> Truncated:
        value = cls(f"{head}... [value truncated at {cap} bytes of {size}]")
        value.size = size
        return value


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    cut: bool
    rowcount: int = -1
    truncated_at: int | None = None
    """The result byte cap, when reading stopped there."""
    values_cut: int = 0
    """How many values were cut at the per-value cap."""
    row_too_large: int | None = None
    """The size in bytes of a row the database did not send (over `size_limit`), where
    reading stopped."""

    def notes(self, decl: DatabaseConnector) -> list[str]:
        """What of the result is missing or cut, one note each (the model's observation
        and a workflow's refusal say the same); the rows cap (`cut`) is not among them."""
        notes = []
        if self.truncated_at is not None:
            notes.append(
                f"result truncated at {self.truncated_at} bytes: select fewer or shorter "
                "columns, or fewer rows"
            )
        if self.values_cut:
            notes.append(f"{self.values_cut} value(s) cut at {decl.max_value_bytes} bytes each")
        if self.row_too_large is not None:
            notes.append(
                f"stopped at a row of {self.row_too_large} bytes, over the "
                f"{size_limit(decl)} bytes one row may have: select fewer or shorter "
                "columns (e.g. left(col, 1000))"
            )
        return notes


class FetchTimeout(TimeoutError):
    """The client-side deadline passed while rows were still being read."""


class Rows:
    """Collects rows while they are fetched, enforcing `max_rows`, the per-value and the
    whole-result byte caps and the deadline, so reading stops as soon as one is reached."""

    def __init__(self, decl: DatabaseConnector, deadline: float) -> None:
        self.limit = decl.max_rows
        self.value_cap = decl.max_value_bytes
        self.total_cap = decl.max_result_bytes
        self.deadline = deadline
        self.rows: list[tuple[Any, ...]] = []
        self.bytes = 0
        self.cut = False
        self.truncated = False
        self.values_cut = 0
        self.row_too_large: int | None = None
        self.items = 0
        """Items of the nested values kept as data so far (`_keeps`)."""

    def want_more(self) -> bool:
        return not (self.cut or self.truncated or self.row_too_large is not None)

    def refuse(self, size: int) -> None:
        """The database withheld a row of `size` bytes: reading stops, and the result says
        why (the rows before it are kept)."""
        self.row_too_large = size

    def add(self, row: tuple[Any, ...]) -> bool:
        """Keep `row` (values capped); False when reading must stop."""
        if time.monotonic() > self.deadline:
            raise FetchTimeout("statement timeout (client deadline)")
        if len(self.rows) >= self.limit:
            self.cut = True
            return False
        capped = []
        for value in row:
            value, size = self._cap(value)
            self.bytes += size
            capped.append(value)
        if self.bytes > self.total_cap:
            self.truncated = True
            return False
        self.rows.append(tuple(capped))
        return True

    def _cap(self, value: Any) -> tuple[Any, int]:
        if isinstance(value, Truncated):
            self.values_cut += 1
            return value, self.value_cap
        if value is None or isinstance(value, bool | int | float):
            return value, 8
        cap = self.value_cap
        if isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value[: cap + 1])
            if len(data) > cap:
                self.values_cut += 1
                return data[:cap], cap
            return data, len(data)
        if isinstance(value, list | tuple | dict) and not self._keeps(value):
            value = _as_text(value)
        text = value if isinstance(value, str) else str(value)
        if len(text) <= cap:
            size = len(text.encode("utf-8", "surrogatepass"))
            if size <= cap:
                return value, size
        self.values_cut += 1
        head = text[:cap].encode("utf-8", "surrogatepass")[:cap].decode("utf-8", "ignore")
        return Truncated.of(head, len(text), cap), cap

    def _keeps(self, value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> bool:
        """Whether a nested value (a JSON or an array column) comes back as data: within
        `MAX_ITEMS` items and `MAX_DEPTH` levels, and within the result's `MAX_RESULT_ITEMS`
        with the ones kept before it. Otherwise it comes back as its text."""
        items = _items(value, min(MAX_ITEMS, MAX_RESULT_ITEMS - self.items))
        if items is None:
            return False
        self.items += items
        return True

    def result(self, columns: list[str]) -> QueryResult:
        return QueryResult(
            columns,
            self.rows,
            self.cut,
            truncated_at=self.total_cap if self.truncated else None,
            values_cut=self.values_cut,
            row_too_large=self.row_too_large,
        )


MAX_ITEMS = 10_000
"""Items (at every level) a nested value may hold and still come back as data. A statement
runs in a worker process that pickles its result back, and fim rebuilds every object of it
on the thread that serves the event loop: seven JSON values of 249,000 empty lists each,
1 MB of text in all, were 1.75M lists and held the loop half a second. Past the bound a
value comes back as its text (cut like any value)."""
MAX_RESULT_ITEMS = 100_000
"""Items the nested values of one result may hold in all."""
MAX_DEPTH = 32
"""Levels a nested value may have and still come back as data (pickling a 900-level one
back from the worker exhausted its recursion)."""


def _items(value: Any, most: int) -> int | None:
    """How many items `value` holds at every level, or None past `most` items or
    `MAX_DEPTH` levels (counted without recursion)."""
    count = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        count += len(children)
        if count > most or depth > MAX_DEPTH:
            return None
        stack.extend((c, depth + 1) for c in children if isinstance(c, list | tuple | dict))
    return count


def _as_text(value: Any) -> str:
    """A nested value too big to come back as data, as JSON text (the model and a workflow
    template see what the database holds; a value JSON cannot write is shown by `str`)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        return f"[a nested value of more than {MAX_ITEMS} items or {MAX_DEPTH} levels]"


def read_one_by_one(fetchone: Callable[[], Any], rows: Rows) -> None:
    """Fetch and cap one row at a time: the driver copies a whole row (every value at full
    size, up to the database's value limit each) before `rows` can cut it, so a batch of
    rows would be held uncut at once; the uncut row is dropped before the next is fetched."""
    while rows.want_more():
        row = fetchone()
        if row is None or not rows.add(tuple(row)):
            return
        del row
