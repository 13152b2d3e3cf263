"""Turning connector results into observations a model reads well and cheaply.

Results go back into the context window, so they are compact (single-line JSON, pipe
tables) and bounded; when something is cut the observation says how much and what to do,
so the model asks for less instead of assuming it saw everything. What is cut is masked
first (`fim.masking.Masker.head`): a cut must not leave part of a secret no mask matches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fim.masking import Masker, known

_CELL_CHARS = 200


def compact_json(data: Any) -> str:
    """One-line JSON with readable separators; non-ASCII kept as is."""
    return json.dumps(data, ensure_ascii=False, separators=(", ", ": "), default=str)


def truncate_text(text: str, limit: int, masker: Masker | None = None) -> str:
    """`text` cut to `limit` characters with a note, masked before it is cut (`Masker.head`:
    a piece at the cut that could begin a secret is masked too). `masker` defaults to
    `known()`, the secrets of every snapshot this process loaded; pass one that also knows
    a connector's own credentials."""
    shown, cut = (known() if masker is None else masker).head(text, limit)
    if not cut:
        return shown
    return f"{shown}\n... [{cut} more characters cut; ask for less data]"


def render_json(data: Any, limit: int, masker: Masker | None = None) -> str:
    """Serialise `data` within `limit` characters, secrets masked (`masker`, default
    `known()`) before anything is cut.

    A top-level array (or the largest array directly inside a top-level object) keeps its
    first items and says how many were cut, so the text stays valid, parseable JSON plus
    one trailing note. Whole items are kept or dropped, so a kept one holds any secret
    whole, and masking the kept text hides it; anything else is cut by `truncate_text`. A
    document that fits comes back as it is (its caller masks it, as every exit does).
    """
    mask = known() if masker is None else masker
    text = compact_json(data)
    if len(text) <= limit:
        return text
    if isinstance(data, list):
        kept = _fit_items(data, lambda items: compact_json(items), limit)
        return mask.text(compact_json(data[:kept])) + _cut_note(len(data) - kept, len(data))
    if isinstance(data, dict):
        lists = [(k, v) for k, v in data.items() if isinstance(v, list) and v]
        if lists:
            key, items = max(lists, key=lambda kv: len(compact_json(kv[1])))
            kept = _fit_items(items, lambda part: compact_json({**data, key: part}), limit)
            if kept or len(compact_json({**data, key: []})) <= limit:
                note = _cut_note(len(items) - kept, len(items), key)
                return mask.text(compact_json({**data, key: items[:kept]})) + note
    return truncate_text(text, limit, mask)


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
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    cut: bool,
    limit: int,
    masker: Masker | None = None,
) -> str:
    """`a | b` header, one line per row, then a row count (and a note when cut); masked
    before it is cut (`truncate_text`)."""
    if not columns:
        return "(the statement returned no columns)"
    mask = known() if masker is None else masker
    lines = [" | ".join(columns)]
    lines.extend(" | ".join(_cell(v, mask) for v in row) for row in rows)
    shown = len(rows)
    if cut:
        lines.append(
            f"({shown} rows shown; more rows exist - add a WHERE clause, aggregate, or "
            "use LIMIT/OFFSET to page)"
        )
    else:
        lines.append(f"({shown} row{'' if shown == 1 else 's'})")
    return truncate_text("\n".join(lines), limit, mask)


def _cell(value: Any, masker: Masker) -> str:
    """One value on one line, at most `_CELL_CHARS` characters: a value that is cut is
    masked whole first, before its escapes, which would change a secret's form."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    text = value if isinstance(value, str) else str(value)
    shown = _escaped(text)
    if len(shown) <= _CELL_CHARS:
        return shown
    head, cut = masker.head(_escaped(masker.text(text)), _CELL_CHARS)
    return head + "..." if cut else head


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("|", "\\|")


__all__ = ["compact_json", "pipe_table", "render_json", "truncate_text"]
