"""How much one answer of an MCP server may hold.

Over HTTP the SDK reads a JSON answer whole (`response.aread()`) and parses it on the
event loop, and its legacy SSE transport keeps an event whole too: a server answering
200 MB of JSON took fim 2 GB of memory and held the loop 1.2 s to parse it (a gigabyte
would take the process down). Over stdio it joins each chunk of a line to the part before
it, so a 20 MB line cost 7.7 s of the loop's CPU, growing with the square of its length.
So each answer is cut off past `MAX_ANSWER_BYTES`: a JSON body in total, an event stream
per event (the stream itself stays open for hours), a stdio server's output per line,
handed to the SDK a whole line at a time. fim passes on at most 400,000 characters of
text and 10 MB of media of one result anyway. Imported with a server's client only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import anyio
import httpx2

MAX_ANSWER_BYTES = 16 * 2**20
_ENDS = re.compile(rb"\n\r?\n")
"""Where an event of an event stream ends: a blank line."""


def _too_large(limit: int) -> str:
    most = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"
    return f"the server's answer is larger than {most}, the most fim reads"


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
        coding = response.headers.get("content-encoding", "").strip().lower()
        if coding not in ("", "identity"):  # decoded, a few KB could be gigabytes
            response.stream = _Refused(
                f"the server sent a '{coding}'-encoded answer, which fim does not read "
                "(it asks for identity)",
                response.stream,
                on_cut,
            )
            return
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        length = response.headers.get("content-length", "")
        declared = int(length) if length.isdigit() and not events else 0
        response.stream = _Capped(response.stream, most, events, declared, on_cut)

    hooks = client.event_hooks
    client.event_hooks = {**hooks, "response": [*hooks.get("response", []), cap]}
    # the cap counts the bytes that arrive: an answer compressed on the wire would be
    # decoded past it, so none is asked for (and one sent anyway is refused, `_Refused`)
    client.headers["Accept-Encoding"] = "identity"
    return client


class _Refused(httpx2.AsyncByteStream):
    """A response body fim does not read: raises `AnswerTooLarge` (why) when it is read,
    where the SDK makes a stream error the request's error."""

    def __init__(self, reason: str, stream: Any, on_cut: Callable[[str], None] | None) -> None:
        self._reason, self._stream, self._on_cut = reason, stream, on_cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._on_cut is not None:
            self._on_cut(self._reason)
        raise AnswerTooLarge(self._reason)
        yield b""  # pragma: no cover - makes this an async generator

    async def aclose(self) -> None:
        await self._stream.aclose()


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
        reason = _too_large(self._limit)
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


class LineTooLong(ConnectionError):
    """A stdio server wrote a line longer than `MAX_ANSWER_BYTES`: the SDK ends the
    session on a `ConnectionError` of its server's output, and the call is told why."""


class _Lines(anyio.abc.ByteReceiveStream):
    """A stdio server's output handed on a whole line at a time (one `receive`: one or
    more complete lines), each at most `limit` bytes; past it the server is stopped
    (`stop`), `LineTooLong` raised, and the rest passes through raw for the SDK to drain
    and drop. The connection starts the server again for its next call."""

    def __init__(
        self,
        inner: Any,
        limit: int,
        on_cut: Callable[[str], None] | None,
        stop: Callable[[], None],
    ) -> None:
        self._inner, self._limit, self._on_cut, self._stop = inner, limit, on_cut, stop
        self._held: list[bytes] = []
        self._size = 0
        self._cut = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._cut:
            return bytes(await self._inner.receive(max_bytes))
        while True:
            try:
                chunk = await self._inner.receive(max_bytes)
            except anyio.EndOfStream:
                if not self._held:
                    raise
                rest, self._held, self._size = b"".join(self._held), [], 0
                return rest
            end = chunk.rfind(b"\n")
            first = chunk.find(b"\n")
            if (first if first >= 0 else len(chunk)) + self._size > self._limit:
                self._cut = True
                reason = _too_large(self._limit)
                if self._on_cut is not None:
                    self._on_cut(reason)
                self._stop()  # the SDK drains the output until the server's pipe closes
                raise LineTooLong(reason)
            if end < 0:
                self._held.append(chunk)
                self._size += len(chunk)
                continue
            lines = b"".join([*self._held, chunk[: end + 1]])
            rest = chunk[end + 1 :]
            self._held, self._size = ([rest], len(rest)) if rest else ([], 0)
            return lines

    async def aclose(self) -> None:
        await self._inner.aclose()


stdio_cut: ContextVar[Callable[[str], None] | None] = ContextVar("fim_stdio_cut", default=None)
"""Who `_Lines` tells when it cuts a line: the connection that is opening its server."""


def cap_stdio() -> None:
    """Read every stdio server's output through `_Lines` (`MAX_ANSWER_BYTES` a line): the
    SDK's process factory, wrapped once. Where the SDK or anyio changed the seams this
    uses, their reading stays as it was (tests/test_mcp_capped.py fails)."""
    # deferred: loading the SDK's stdio client costs hundreds of ms
    from mcp.client import stdio

    made = getattr(stdio, "_create_platform_compatible_process", None)
    if made is None or getattr(made, "capped", False):
        return

    async def spawned(*args: Any, **kwargs: Any) -> Any:
        process = await made(*args, **kwargs)
        inner = getattr(process, "_stdout", None)
        if inner is not None:
            group = process.pid  # the SDK starts each server in a session of its own

            def stop() -> None:
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):  # not a group of its own
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()

            process._stdout = _Lines(inner, MAX_ANSWER_BYTES, stdio_cut.get(), stop)
        return process

    spawned.capped = True  # type: ignore[attr-defined]
    stdio._create_platform_compatible_process = spawned


class _Reported(logging.Filter):
    """The SDK logs a cut answer with its traceback (on a user's terminal, for `fim run`);
    the call's observation already says why, so those records are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        seen = record.exc_info[1] if record.exc_info else None
        while seen is not None:
            if isinstance(seen, AnswerTooLarge | LineTooLong):
                return False
            seen = seen.__cause__ or seen.__context__
        return True


for _name in ("mcp.client.stdio", "mcp.client.streamable_http", "mcp.client.sse"):
    logging.getLogger(_name).addFilter(_Reported())
