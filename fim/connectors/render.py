"""Turning connector results into observations a model reads well and cheaply.

Results go back into the context window, so they are compact (single-line JSON, pipe
tables) and bounded; when something is cut the observation says how much and what to do,
so the model asks for less instead of assuming it saw everything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

_CELL_CHARS = 200


def compact_json(data: Any) -> str:
    """One-line JSON with readable separators; non-ASCII kept as is."""
    return json.dumps(data, ensure_ascii=False, separators=(", ", ": "), default=str)


def truncate_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"{text[:limit]}\n... [{cut} more characters cut; ask for less data]"


def render_json(data: Any, limit: int) -> str:
    """Serialise `data` within `limit` characters.

    A top-level array (or the largest array directly inside a top-level object) keeps its
    first items and says how many were cut, so the text stays valid, parseable JSON plus
    one trailing note.
    """
    text = compact_json(data)
    if len(text) <= limit:
        return text
    if isinstance(data, list):
        kept = _fit_items(data, lambda items: compact_json(items), limit)
        return compact_json(data[:kept]) + _cut_note(len(data) - kept, len(data))
    if isinstance(data, dict):
        lists = [(k, v) for k, v in data.items() if isinstance(v, list) and v]
        if lists:
            key, items = max(lists, key=lambda kv: len(compact_json(kv[1])))
            kept = _fit_items(items, lambda part: compact_json({**data, key: part}), limit)
            if kept or len(compact_json({**data, key: []})) <= limit:
                note = _cut_note(len(items) - kept, len(items), key)
                return compact_json({**data, key: items[:kept]}) + note
    return truncate_text(text, limit)


def _fit_items(items: list[Any], render: Any, limit: int) -> int:
    """The largest prefix length whose rendering fits (binary search: rendering is linear)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(render(items[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _cut_note(cut: int, total: int, key: str | None = None) -> str:
    where = f" of '{key}'" if key else ""
    return (
        f"\n... {cut} more items cut{where} ({total} in total; use filters or pagination "
        "to see the rest)"
    )


def pipe_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, cut: bool, limit: int
) -> str:
    """`a | b` header, one line per row, then a row count (and a note when cut)."""
    if not columns:
        return "(the statement returned no columns)"
    lines = [" | ".join(columns)]
    lines.extend(" | ".join(_cell(v) for v in row) for row in rows)
    shown = len(rows)
    if cut:
        lines.append(
            f"({shown} rows shown; more rows exist - add a WHERE clause, aggregate, or "
            "use LIMIT/OFFSET to page)"
        )
    else:
        lines.append(f"({shown} row{'' if shown == 1 else 's'})")
    return truncate_text("\n".join(lines), limit)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    text = value if isinstance(value, str) else str(value)
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("|", "\\|")
    if len(text) > _CELL_CHARS:
        text = text[:_CELL_CHARS] + "..."
    return text


__all__ = ["compact_json", "pipe_table", "render_json", "truncate_text"]
