"""The one rule that names a tool built from config for the model: a connector's action
(`{connector}__{action}`) and an MCP server's tool (`{server}__{tool}`) alike.

Its own module because two packages name tools by it (`fim.connectors.http_tool`,
`fim.mcp.naming`), so the same rule holds for both without either importing the other;
hooks try a matcher against the whole name as well as this one (`fim.hooks.claude.names_of`).
"""

from __future__ import annotations

import hashlib
import re

NAME_LIMIT = 64
"""Longest function name OpenAI, Anthropic and Gemini accept (all three: 64)."""
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def provider_safe(full: str) -> str:
    """`full` with every character outside `[A-Za-z0-9_-]` made `_`, not shortened."""
    return _NAME_CHARS.sub("_", full)


def tool_name(owner: str, name: str) -> str:
    """`{owner}__{name}`, made safe for every provider: characters outside
    `[A-Za-z0-9_-]` become `_` and a name over 64 characters keeps its first 54 and a digest
    of the whole (`_h` + 8 hex digits); a name that had to change gets the digest even when
    short, so `a.b` and `a_b` stay apart. Deterministic (the same names always give the same
    tool name, in every mode) and collision-free in practice: two shortened names share a
    32-bit digest only if their full names collide in SHA-256's first 8 hex digits."""
    full = f"{owner}__{name}"
    safe = provider_safe(full)
    if len(safe) <= NAME_LIMIT and safe == full:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    if len(safe) <= NAME_LIMIT:
        return f"{safe[: NAME_LIMIT - 10]}_h{digest}"
    return f"{safe[: NAME_LIMIT - 10].rstrip('_')}_h{digest}"


__all__ = ["NAME_LIMIT", "provider_safe", "tool_name"]
