"""Bounded `discover` for HTTP connectors: a compact index first, full schemas on request.

A real API has hundreds of actions (GitHub: 1,223); listing every schema at once is a
million characters, far over any context window. So `discover` answers in pages that never
exceed a budget: without `action` it returns an index (one short line per action, filtered
by `query` over names, tags, summaries and paths, and by `tag`), and with `action` (one name
or several, comma-separated) the full parameter schemas of just those actions. When the
full listing of what was asked fits the budget (a small connector, a narrow search), it is
returned at once, which saves the model a turn. Whatever is
cut is said, with the call that gets the rest.

The budget (fim/run/budget.py) is in tokens, `FIM_DISCOVER_BUDGET_TOKENS`, default 4,000.
"""

from __future__ import annotations

import difflib
from collections import Counter
from typing import TYPE_CHECKING

from fim.connectors.render import compact_json
from fim.run.budget import BYTES_PER_TOKEN, budget_tokens

if TYPE_CHECKING:
    from fim.config.schema import HttpAction, HttpConnector

_LINE_CHARS = 160
_TAGS_SHOWN = 30


def _size(text: str) -> int:
    return len(text.encode())


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _index_line(name: str, action: HttpAction) -> str:
    line = f"- {name} ({action.method} {action.path})"
    if action.description:
        line += f": {action.description}"
    return _short(line, _LINE_CHARS)


def matches(name: str, action: HttpAction, query: str, tag: str) -> bool:
    """Every word of `query` in the name, tags, summary or path; `tag` exactly (any case)."""
    if tag and tag.lower() not in (t.lower() for t in action.tags):
        return False
    hay = " ".join([name, action.path, action.description, *action.tags]).lower()
    hay += " " + hay.replace("_", " ").replace("-", " ").replace("/", " ")
    return all(word in hay for word in query.lower().split())


def tag_counts(decl: HttpConnector) -> list[tuple[str, int]]:
    counts = Counter(t for a in decl.actions.values() for t in a.tags)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def discover(
    connector: str,
    decl: HttpConnector,
    *,
    action: str | None = None,
    query: str = "",
    tag: str = "",
    page: int = 1,
    budget: int | None = None,
) -> str:
    """The observation of one `discover` call, never over `budget` tokens."""
    limit = (budget or budget_tokens()) * BYTES_PER_TOKEN
    header = f"connector {connector}: {_short(decl.description or decl.base_url, 200)}"
    if action:
        return _schemas(connector, decl, header, action, limit)
    return _index(connector, decl, header, query.strip(), tag.strip(), max(1, page), limit)


def _schemas(connector: str, decl: HttpConnector, header: str, asked: str, limit: int) -> str:
    names = [n.strip() for n in asked.split(",") if n.strip()]
    known = [n for n in names if n in decl.actions]
    unknown = [n for n in names if n not in decl.actions]
    footer = "Run one with subcommand=execute, action=<name>, parameters={...}."
    parts = [header]
    if unknown:
        parts.append(unknown_actions(connector, decl, unknown))
    used = _size("\n".join(parts)) + _size(footer) + 2
    left_out: list[str] = []
    for name in known:
        a = decl.actions[name]
        flags = a.access + (", requires confirmation" if a.requires_confirmation else "")
        block = (
            f"- {name} ({a.method} {a.path}; {flags}): {a.description or 'no description'}\n"
            f"  parameters: {compact_json(a.parameters)}"
        )
        room = limit - used - 200
        if _size(block) > room:
            if room < 400 or len(parts) > 1 + bool(unknown):
                left_out.append(name)
                continue
            block = block.encode()[: room - 120].decode(errors="ignore") + (
                f"… [the schema of {name} is cut at the discover budget; pass the fields "
                "you know and execute: errors name what is missing]"
            )
        parts.append(block)
        used += _size(block) + 1
    if left_out:
        parts.append(f"Not shown (budget): {', '.join(left_out)}; ask for fewer at once.")
    parts.append(footer)
    return "\n".join(parts)


def unknown_actions(connector: str, decl: HttpConnector, names: list[str]) -> str:
    """A bounded 'no such action' note with the closest names, never the whole list."""
    listed = ", ".join(decl.actions) or "none"
    what = f"Connector '{connector}' has no action {', '.join(repr(n) for n in names)}."
    if len(listed) <= 1500:
        return f"{what} Valid actions: {listed}."
    hints: list[str] = []
    for name in names:
        hints += difflib.get_close_matches(name, list(decl.actions), n=3, cutoff=0.5)
    near = f" Closest: {', '.join(dict.fromkeys(hints))}." if hints else ""
    return f"{what}{near} Search them with subcommand=discover, query=<words>."


def _index(
    connector: str, decl: HttpConnector, header: str, query: str, tag: str, page: int, limit: int
) -> str:
    found = [(n, a) for n, a in decl.actions.items() if matches(n, a, query, tag)]
    if found and page == 1:
        full = _schemas(connector, decl, header, ",".join(n for n, _ in found), limit * 4)
        if _size(full) <= limit:
            return full  # a small connector (or search): everything at once saves a turn
    parts = [header]
    what = " ".join(
        p for p in (f"query={query!r}" if query else "", f"tag={tag!r}" if tag else "") if p
    )
    tags = tag_counts(decl)
    if tags and not query and not tag:
        shown = ", ".join(f"{t} ({n})" for t, n in tags[:_TAGS_SHOWN])
        more = f", and {len(tags) - _TAGS_SHOWN} more tags" if len(tags) > _TAGS_SHOWN else ""
        parts.append(_short(f"tags: {shown}{more}", 1500))
    if not found:
        parts.append(f"No action matches {what or 'anything'}; try fewer or other words.")
        return "\n".join(parts)
    footer_room = 400
    room = limit - _size("\n".join(parts)) - footer_room
    pages: list[list[str]] = [[]]
    used = 0
    for name, action in found:
        line = _index_line(name, action)
        if used + _size(line) + 1 > room and pages[-1]:
            pages.append([])
            used = 0
        pages[-1].append(line)
        used += _size(line) + 1
    page = min(page, len(pages))
    lines = pages[page - 1]
    scope = f" matching {what}" if what else ""
    parts.append(
        f"{len(found)} action(s){scope}; page {page} of {len(pages)} (one line each, no schemas):"
    )
    parts += lines
    hint = "For parameters call discover with action=<name> (or several, comma-separated)."
    if page < len(pages):
        hint += f" Next page: page={page + 1}; or narrow with query=<words> or tag=<tag>."
    parts.append(hint)
    return "\n".join(parts)


__all__ = [
    "BYTES_PER_TOKEN",
    "budget_tokens",
    "discover",
    "matches",
    "tag_counts",
    "unknown_actions",
]
