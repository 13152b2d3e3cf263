"""Reading a model endpoint's HTTP body for the fast path (`fim.llm.openai_compat`): bounded,
and split into server-sent events.

No body is read whole on trust: a reply's stops at `reply_bytes()` (what a reply of
`fim.llm.wire.MAX_REPLY_CHARS` characters can take), an error's at `MAX_ERROR_BODY`, so a
broken or hostile `api_base` sending hundreds of megabytes costs a few, not gigabytes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fim.llm import wire

BYTES_PER_CHAR = 6
"""The most bytes one character of text takes in a JSON body (`\\uXXXX`)."""

ENVELOPE_BYTES = 65_536
"""Room for what a reply carries besides its text (ids, usage, finish reason)."""

MAX_ERROR_BODY = 65_536
"""The most of an error's body fim reads: it quotes `MAX_ERROR_DETAIL` characters of it."""


def reply_bytes() -> int:
    """The most bytes of a reply's body (or of one streamed event) fim reads."""
    return wire.MAX_REPLY_CHARS * BYTES_PER_CHAR + ENVELOPE_BYTES


async def read_body(response: Any, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of `response`'s body (an aiohttp response), and whether that
    was all of it; the caller closes a connection whose body was not all read."""
    content = response.content
    parts: list[bytes] = []
    size = 0
    while chunk := await content.readany():
        size += len(chunk)
        if size > limit:
            parts.append(chunk[: len(chunk) - (size - limit)])
            return b"".join(parts), False
        parts.append(chunk)
    return b"".join(parts), True


def error_detail(raw: bytes) -> str:
    """The provider's error message, or the body; whole: the caller masks it, then cuts it
    to `MAX_ERROR_DETAIL` (`quoted`)."""
    try:
        data = json.loads(raw)
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)
    except ValueError:
        pass
    return raw.decode("utf-8", "replace") or "(empty body)"


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The `data:` payloads of a server-sent event stream, one per event, from raw chunks
    (splitting bytes ourselves is cheaper than any line iterator). An event longer than
    `reply_bytes()` raises `ReplyTooLarge` before more of it is held."""
    limit = reply_bytes()
    buffer = bytearray()
    start = 0  # where "\n\n" may begin: each byte is searched once, however long an event
    async for chunk in chunks:
        if buffer.endswith(b"\r") and chunk.startswith(b"\n"):
            del buffer[-1]  # a "\r\n" split between two chunks
        buffer += chunk.replace(b"\r\n", b"\n") if b"\r" in chunk else chunk
        while (end := buffer.find(b"\n\n", start)) >= 0:
            data = _event_data(bytes(buffer[:end]))
            del buffer[: end + 2]
            start = 0
            if data is not None:
                yield data
        start = max(len(buffer) - 1, 0)
        if len(buffer) > limit:
            raise wire.ReplyTooLarge("")
    data = _event_data(bytes(buffer))
    if data is not None:
        yield data


def _event_data(event: bytes) -> str | None:
    lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).decode("utf-8") if lines else None
