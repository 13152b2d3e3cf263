"""How much one answer of an MCP server may hold.

Over HTTP the SDK reads a JSON answer whole (`response.aread()`) and parses it on the
event loop, and its legacy SSE transport keeps an event whole too: a server answering
200 MB of JSON took fim 2 GB of memory and held the loop 1.2 s to parse it (a gigabyte
would take the process down). Over stdio it joins each chunk of a line to the part before
it, so a 20 MB line cost 7.7 s of the loop's CPU, growing with the square of its length.
So each answer is cut off past `MAX_ANSWER_BYTES`: a JSON body in total, an event stream
per event (the stream itself stays open for hours), a stdio server's output per line,
handed to the SDK a whole line at a time. fim passes on at most 400,000 characters of
text and 10 MB of media of one result anyway.

Bytes are not the whole cost: the SDK parses and validates an answer on the event loop,
at a cost that grows with what it holds. 500,000 empty text blocks (15 MB) held the loop
5 s, and an answer nested past the parser's depth limit was dropped unanswered, its call
waiting out its timeout. So before the SDK sees an answer, `shape_problem` counts its
values, objects and levels with C-level scans of the bytes, and one past `MAX_VALUES`,
`MAX_OBJECTS` or `MAX_DEPTH` is refused like one past the byte cap. Imported with a
server's client only.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, Literal

import anyio
import httpx2

MAX_ANSWER_BYTES = 16 * 2**20
MAX_OBJECTS = 50_000
"""Objects and arrays one answer may hold: validating 500,000 text blocks took the SDK
2.5 s of the event loop, 50,000 a tenth of that (and a `tools/list` of 2,000 tools, the
most fim offers, with 20 objects in each schema, still fits)."""
MAX_VALUES = 1_000_000
"""Keys and values one answer may hold (strings, numbers): parsing 5 million empty
strings took the SDK 0.5 s of the loop."""
MAX_DEPTH = 128
"""Levels one answer may nest. The SDK's parser gives up at 200 and drops the message
(logging a traceback), so the request it answered waited out its whole timeout; what is
refused here is refused at once, and below the parser's limit with room to spare."""
MAX_EVENT_LINES = 50_000
"""Lines of one event of an event stream: an event reaches the SDK whole (`_Capped`), and
its reader handles each line in Python."""

_ENDS = re.compile(rb"(?>\r\n|\n|\r)(?>\r\n|\n|\r)")
"""Where an event of an event stream ends: a blank line, lines ending in CRLF, LF or CR as
the SDK's reader splits them (a CRLF whole: the SDK dispatches an event only once it has
seen its blank line's end, and a CR alone could still be the start of a CRLF)."""
_DATA = re.compile(rb"^data: ?(.*)$", re.MULTILINE)
"""An event's data lines (the JSON the SDK parses), in an event whose line ends are LF."""
_BRACKETS = bytes.maketrans(b"[]", b"{}")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"{}[]"))


def _too_large(limit: int) -> str:
    most = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"
    return f"the server's answer is larger than {most}, the most fim reads"


def _too_many(limit: int, what: str) -> str:
    return f"the server's answer holds more than {limit:,} {what}, the most fim reads"


def _too_deep(limit: int) -> str:
    return f"the server's answer is nested deeper than {limit} levels, the most fim reads"


def _fits(text: bytes) -> bool:
    """Whether `text` is within every cap counting what strings hold too: so at least what
    is outside them, whichever quotes open a string (a few `bytes.count`, no copy)."""
    opened = text.count(b"{") + text.count(b"[")
    if opened > min(MAX_DEPTH, MAX_OBJECTS):  # else none can nest deeper or be too many
        return False
    return opened + text.count(b",") + text.count(b'"') // 2 <= MAX_VALUES


def shape_problem(text: bytes) -> str | None:
    """Why one JSON text (a message) holds more than fim reads of an answer, or None.

    Counted, not parsed: parsing is the cost being bounded. C-level scans of the bytes
    (`count`, `replace`, `split`, `translate`) take a 16 MB answer 10 to 80 ms. Brackets
    and commas inside strings are not counted (a text block of source code holds any
    number): with every escaped backslash and quote removed, each quote left opens or
    closes a string. In a text that is not valid JSON the strings counted are a parser's up
    to where it would stop, so what the parser would read is counted in any case. "Values"
    are strings, commas and objects, about one for each key and value."""
    if _fits(text):
        return None
    plain = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = plain.count(b'"') // 2
    if strings > MAX_VALUES:  # before the split below, whose cost grows with them
        return _too_many(MAX_VALUES, "values")
    outside = b"".join(plain.split(b'"')[::2])
    brackets = outside.translate(_BRACKETS, _NOT_BRACKETS)  # `[` and `]` become `{` `}`
    if len(brackets) > 2 * MAX_OBJECTS:
        return _too_many(MAX_OBJECTS, "objects and arrays")
    if strings + outside.count(b",") + len(brackets) // 2 > MAX_VALUES:
        return _too_many(MAX_VALUES, "values")
    if brackets.count(b"{") > MAX_DEPTH:  # else it cannot nest deeper
        opening = ord("{")
        steps = (1 if byte == opening else -1 for byte in brackets)
        if max(itertools.accumulate(steps)) > MAX_DEPTH:
            return _too_deep(MAX_DEPTH)
    return None


def _lines_problem(lines: bytes) -> str | None:
    """`shape_problem` of each line of a stdio server's output: each line is a message of
    its own, and a quote one leaves open must not hide the structure of the next."""
    if _fits(lines):
        return None
    for line in lines.split(b"\n"):
        why = shape_problem(line)
        if why is not None:
            return why
    return None


def _event_problem(event: bytes) -> str | None:
    """`shape_problem` of an event's data, the JSON the SDK parses of it: the other fields
    (`id: "`) must not open a string that hides the data's structure."""
    if _fits(event) and event.count(b"\n") + event.count(b"\r") <= MAX_EVENT_LINES:
        return None
    plain = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if plain.count(b"\n") > MAX_EVENT_LINES:
        return _too_many(MAX_EVENT_LINES, "lines in one event")
    return shape_problem(b"\n".join(_DATA.findall(plain)))


class AnswerTooLarge(httpx2.StreamError):
    """The server sent more than fim reads of one answer: more than `MAX_ANSWER_BYTES`, or
    more values, objects or levels than `shape_problem` lets through."""


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
        body = body_of(response.headers.get("content-type", ""))
        length = response.headers.get("content-length", "")
        declared = int(length) if length.isdigit() and body != "events" else 0
        response.stream = _Capped(response.stream, most, body, declared, on_cut)

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


Body = Literal["events", "json", "other"]
"""What the SDK does with a response body: reads it as an event stream, parses it whole as
JSON, or neither (`shape_problem` applies to what it parses)."""


def body_of(content_type: str) -> Body:
    """What the SDK makes of a body of `content_type`, tested as the SDK tests it."""
    kind = content_type.strip().lower()
    if kind.startswith("text/event-stream"):
        return "events"
    return "json" if kind.startswith("application/json") else "other"


class _Capped(httpx2.AsyncByteStream):
    """A response body that raises `AnswerTooLarge` past `limit` bytes: in total, or for an
    event stream, since the last event's end (a blank line). A JSON body is handed on
    whole, and each event once it has ended, after `shape_problem` found it within the
    caps: the SDK can do nothing with part of either. Raised when the body is read, where
    the SDK turns a stream error into the request's error (raised by the hook, it ended the
    whole session)."""

    def __init__(
        self,
        stream: Any,
        limit: int,
        body: Body,
        declared: int,
        on_cut: Callable[[str], None] | None,
    ) -> None:
        self._stream, self._limit, self._body = stream, limit, body
        self._declared, self._on_cut = declared, on_cut

    def _cut(self, reason: str | None = None) -> AnswerTooLarge:
        reason = reason or _too_large(self._limit)
        if self._on_cut is not None:
            self._on_cut(reason)
        return AnswerTooLarge(reason)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared > self._limit:  # said so up front: not one byte read
            raise self._cut()
        if self._body == "events":
            async for events in self._events():
                yield events
            return
        held, parts = 0, []
        async for chunk in self._stream:
            held += len(chunk)
            if held > self._limit:
                raise self._cut()
            if self._body == "json":
                parts.append(chunk)
            else:
                yield chunk
        if parts:
            whole = b"".join(parts)
            why = shape_problem(whole)
            if why is not None:
                raise self._cut(why)
            yield whole

    async def _events(self) -> AsyncIterator[bytes]:
        """The events that end in each chunk, checked one by one; the one still open is
        held (at most `limit` bytes) until its end arrives."""
        held: list[bytes] = []
        size, tail = 0, b""
        async for chunk in self._stream:
            seen, before = tail + chunk, len(tail)
            start, ended = 0, []
            for end in _ENDS.finditer(seen):
                if end.end() <= before:
                    continue  # ended in the last chunk: handed on with it
                stop = end.end() - before
                if size + stop - start > self._limit:
                    raise self._cut()
                event = b"".join([*held, chunk[start:stop]])
                why = _event_problem(event)
                if why is not None:
                    raise self._cut(why)
                ended.append(event)
                held, size, start = [], 0, stop
            if start < len(chunk):
                held.append(chunk[start:])
                size += len(chunk) - start
            if size > self._limit:
                raise self._cut()
            tail = seen[-2:]
            if ended:
                yield b"".join(ended)
        if held:  # the stream ended in an event: the SDK dispatches no event of it
            yield b"".join(held)

    async def aclose(self) -> None:
        await self._stream.aclose()


class LineRefused(ConnectionError):
    """A stdio server wrote a line longer than `MAX_ANSWER_BYTES`, or one holding more than
    `shape_problem` lets through: the SDK ends the session on a `ConnectionError` of its
    server's output, and the call is told why."""


class _Lines(anyio.abc.ByteReceiveStream):
    """A stdio server's output handed on a whole line at a time (one `receive`: one or
    more complete lines), each at most `limit` bytes and within `shape_problem`'s caps;
    past them the server is stopped (`stop`), `LineRefused` raised, and the rest passes
    through raw for the SDK to drain and drop. The connection starts the server again for
    its next call: which request a refused line answered is not known without parsing it,
    so the calls in flight fail with it, as they do when a line is too long."""

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
                raise self._refuse(_too_large(self._limit))
            if end < 0:
                self._held.append(chunk)
                self._size += len(chunk)
                continue
            lines = b"".join([*self._held, chunk[: end + 1]])
            rest = chunk[end + 1 :]
            self._held, self._size = ([rest], len(rest)) if rest else ([], 0)
            why = _lines_problem(lines)
            if why is not None:
                raise self._refuse(why)
            return lines

    def _refuse(self, reason: str) -> LineRefused:
        self._cut = True
        if self._on_cut is not None:
            self._on_cut(reason)
        self._stop()  # the SDK drains the output until the server's pipe closes
        return LineRefused(reason)

    async def aclose(self) -> None:
        await self._inner.aclose()


stdio_cut: ContextVar[Callable[[str], None] | None] = ContextVar("fim_stdio_cut", default=None)
"""Who `_Lines` tells when it cuts a line: the connection that is opening its server."""


def cap_stdio() -> None:
    """Read every stdio server's output through `_Lines` (`MAX_ANSWER_BYTES` a line, within
    `shape_problem`'s caps): the SDK's process factory, wrapped once. Where the SDK or anyio
    changed the seams this uses, their reading stays as it was (tests/test_mcp_capped.py
    fails)."""
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
            if isinstance(seen, AnswerTooLarge | LineRefused):
                return False
            seen = seen.__cause__ or seen.__context__
        return True


for _name in ("mcp.client.stdio", "mcp.client.streamable_http", "mcp.client.sse"):
    logging.getLogger(_name).addFilter(_Reported())
