"""An MCP `CallToolResult` as a fim observation: text for every model, media for the ones
that accept it.

Its own module because what the model sees of a result (text, placeholders, which media is
kept and how much) changes with the models, not with how a call is made; block rendering
itself is fim/mcp/content.py.
"""

from __future__ import annotations

import json
from typing import Any

from fim.mcp.content import render_content
from fim.types import ToolResult

MAX_MEDIA_BYTES = 5_000_000
"""Base64 characters of image/audio kept per result for models that accept media."""


def media_of(blocks: list[Any]) -> list[dict[str, str]]:
    """Image and audio blocks (and image/audio embedded resources) as
    `{"type", "mime_type", "data"}` (base64), for a model that accepts media; the text
    observation carries a placeholder for each. Oversized media is left out."""
    media: list[dict[str, str]] = []
    budget = MAX_MEDIA_BYTES
    for block in blocks:
        kind = getattr(block, "type", "")
        if kind in ("image", "audio"):
            mime, data = block.mime_type, block.data
        elif kind == "resource" and getattr(block.resource, "blob", None) is not None:
            mime, data = block.resource.mime_type or "", block.resource.blob
            kind = mime.split("/", 1)[0]
            if kind not in ("image", "audio"):
                continue
        else:
            continue
        if len(data) > budget:
            continue
        budget -= len(data)
        media.append({"type": kind, "mime_type": mime, "data": data})
    return media


def to_result(result: Any, server: str, tool: str) -> ToolResult:
    """A `CallToolResult` as a fim observation; `isError` marks it as an error. Images
    and audio are placeholders in the text and the data in `metadata["media"]`."""
    parts = [render_content(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    text = "\n".join(p for p in parts if p) or "(the tool returned no content)"
    meta: dict[str, Any] = {"server": server, "tool": tool}
    media = media_of(list(result.content))
    if media:
        meta["media"] = media
    return ToolResult(content=text, is_error=bool(result.is_error), metadata=meta)
