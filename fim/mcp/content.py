"""MCP content blocks as text, for tool results and sampling requests alike.

A leaf module: `fim.mcp.results` (tool results) and `fim.mcp.sampling` (requests a server sends)
both render blocks, and the connection starts sampling, so the renderer sits below all three.
"""

from __future__ import annotations

import base64
from typing import Any


def _b64_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (ValueError, TypeError):
        return len(data) * 3 // 4


def render_content(block: Any) -> str:
    """One content block as observation text; binary content is summarised, not dumped."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_b64_size(block.data)} bytes]"
    if kind == "resource":
        res = block.resource
        text = getattr(res, "text", None)
        if text is not None:
            return text
        mime = res.mime_type or "application/octet-stream"
        return f"[resource: {res.uri}, {mime}, {_b64_size(res.blob)} bytes]"
    if kind == "resource_link":
        mime = f", {block.mime_type}" if block.mime_type else ""
        return f"[resource link: {block.name} <{block.uri}>{mime}]"
    return f"[{kind or 'unknown'} content]"
