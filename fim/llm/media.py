"""Images and audio from tool results, for models that accept them.

A tool result (an MCP tool's image, a resource's audio) carries media in
`metadata["media"]` as `{"type", "mime_type", "data"}` (base64), with a text placeholder in
the observation. A model that accepts the medium gets it as a user message after the
tool results (OpenAI tool messages hold text only); every other model keeps the
placeholder. What a model accepts is declared (`media:` in its model settings) or, by
default, what litellm's model table says (`supports_vision`, `supports_audio_input`).

Media comes from tool servers, which are untrusted: only a few well-known types pass,
the bytes must decode and start like the type they claim, and sizes are capped per item
and per turn.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

from fim.llm.catalog import model_info
from fim.types import Message

IMAGE_TYPES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
AUDIO_TYPES = {
    "audio/wav": (b"RIFF",),
    "audio/x-wav": (b"RIFF",),
    "audio/mpeg": (b"ID3", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"),
    "audio/mp3": (b"ID3", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"),
}
MAX_ITEM_CHARS = 5_000_000
"""Base64 characters of one image or clip (about 3.7 MB of bytes)."""
MAX_TURN_CHARS = 10_000_000
MAX_TURN_ITEMS = 8


def accepted_media(model: Any) -> frozenset[str]:
    """`image` and/or `audio`: what `model` takes as input, declared or from the table."""

    seen = 0
    while model is not None and seen < 5:  # through wrappers (metering, JSON mode)
        settings = getattr(model, "settings", None)
        declared = getattr(settings, "media", None)
        if declared is not None:
            return frozenset(declared)
        name = getattr(settings, "model", None) or getattr(model, "name", "")
        info = model_info(name) if isinstance(name, str) and name else None
        if info:
            kinds = set()
            if info.get("supports_vision"):
                kinds.add("image")
            if info.get("supports_audio_input"):
                kinds.add("audio")
            return frozenset(kinds)
        model = getattr(model, "inner", None)
        seen += 1
    return frozenset()


def valid_item(item: Any) -> dict[str, str] | None:
    """The item if it is an allowed, well-formed, not oversized image or clip."""
    if not isinstance(item, dict):
        return None
    kind, mime, data = item.get("type"), item.get("mime_type"), item.get("data")
    table = IMAGE_TYPES if kind == "image" else AUDIO_TYPES if kind == "audio" else None
    if table is None or not isinstance(mime, str) or not isinstance(data, str):
        return None
    magic = table.get(mime.lower())
    if magic is None or not data or len(data) > MAX_ITEM_CHARS:
        return None
    try:
        head = base64.b64decode(data[:64], validate=True)
    except (binascii.Error, ValueError):
        return None
    if not head.startswith(magic):
        return None
    if mime.lower() == "image/webp" and head[8:12] != b"WEBP":
        return None
    if mime.lower() in ("audio/wav", "audio/x-wav") and head[8:12] != b"WAVE":
        return None
    return {"type": str(kind), "mime_type": mime.lower(), "data": data}


def _decodes(data: str) -> bool:
    try:
        binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError):
        return False
    return True


def media_message(
    results: Iterable[tuple[str, list[Any]]], accepted: frozenset[str]
) -> Message | None:
    """One user message carrying the accepted media of this turn's tool results (given as
    (tool name, media items)), or None when there is nothing to send."""
    images: list[str] = []
    audio: list[str] = []
    names: list[str] = []
    budget = MAX_TURN_CHARS
    for name, items in results:
        for raw in items:
            item = valid_item(raw)
            if item is None or item["type"] not in accepted:
                continue
            if len(images) + len(audio) >= MAX_TURN_ITEMS or len(item["data"]) > budget:
                continue
            if not _decodes(item["data"]):
                continue
            budget -= len(item["data"])
            url = f"data:{item['mime_type']};base64,{item['data']}"
            (images if item["type"] == "image" else audio).append(url)
            if name not in names:
                names.append(name)
    if not images and not audio:
        return None
    what = " and ".join(k for k, v in (("images", images), ("audio", audio)) if v)
    text = f"[{what} returned by the tool call(s) above: {', '.join(names)}]"
    return Message(role="user", content=text, images=images, audio=audio)
