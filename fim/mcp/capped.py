"""How much one answer of an MCP server over HTTP may hold.

The SDK reads a JSON answer whole (`response.aread()`) and parses it on the event loop,
and its legacy SSE transport keeps an event whole too. A server answering 200 MB of JSON
took fim 2 GB of memory and held the loop 1.2 s to parse it (a gigabyte would take the
process down). So each answer is cut off past `MAX_ANSWER_BYTES`: a JSON body in total,
an event stream per event (the stream itself stays open for hours). fim passes on at most
400,000 characters of text and 10 MB of media of one result anyway. Imported with an HTTP
server's client only.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2

MAX_ANSWER_BYTES = 16 * 2**20
_ENDS = re.compile(rb"\n\r?\n")
"""Where an event of an event stream ends: a blank line."""


class AnswerTooLarge(httpx2.StreamError):
    """The server sent more than `MAX_ANSWER_BYTES` in one answer."""


def capped(
    client: httpx2.AsyncClient,
    limit: int | None = None,
    on_cut: Callable[[str], None] | None = None,
) -> httpx2.AsyncClient:
    """`client` with every response read at most `limit` bytes an answer (returned for
    chaining); `on_cut` is told why when it stops reading one. A response hook wraps the
    body's stream before anyone reads it, so it holds whatever transport or proxy the
    client uses."""

    most = limit or MAX_ANSWER_BYTES

    async def cap(response: httpx2.Response) -> None:
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        length = response.headers.get("content-length", "")
        declared = int(length) if length.isdigit() and not events else 0
        response.stream = _Capped(response.stream, most, events, declared, on_cut)

    hooks = client.event_hooks
    client.event_hooks = {**hooks, "response": [*hooks.get("response", []), cap]}
    return client


class _Capped(httpx2.AsyncByteStream):
    """A response body that raises `AnswerTooLarge` past `limit` bytes: in total, or for an
    event stream, since the last event's end (a blank line). Raised when the body is read,
    where the SDK turns a stream error into the request's error (raised by the hook, it
    ended the whole session)."""

    def __init__(
        self,
        stream: Any,
        limit: int,
        events: bool,
        declared: int,
        on_cut: Callable[[str], None] | None,
    ) -> None:
        self._stream, self._limit, self._events = stream, limit, events
        self._declared, self._on_cut = declared, on_cut

    def _cut(self) -> AnswerTooLarge:
        size = self._limit
        most = f"{size // 2**20} MiB" if size >= 2**20 else f"{size // 2**10} KiB"
        reason = f"the server's answer is larger than {most}, the most fim reads"
        if self._on_cut is not None:
            self._on_cut(reason)
        return AnswerTooLarge(reason)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared > self._limit:  # said so up front: not one byte read
            raise self._cut()
        held, tail = 0, b""
        async for chunk in self._stream:
            if not self._events:
                held += len(chunk)
            else:  # each event that ends in this chunk, then the one still open
                seen, before = tail + chunk, len(tail)
                used = 0
                for end in _ENDS.finditer(seen):
                    if end.end() <= before:
                        continue  # ended in the last chunk: counted there
                    if held + end.end() - before - used > self._limit:
                        raise self._cut()
                    held, used = 0, end.end() - before
                held += len(chunk) - used
                tail = seen[-2:]
            if held > self._limit:
                raise self._cut()
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()
