"""How many bytes of one answer of an MCP server fim reads, and the readers that hand the
SDK each message whole.

Over HTTP the SDK reads a JSON answer whole (`response.aread()`) and parses it on the
event loop, and its legacy SSE transport keeps an event whole too: a server answering
200 MB of JSON took fim 2 GB of memory and held the loop 1.2 s to parse it (a gigabyte
would take the process down). Over stdio it joins each chunk of a line to the part before
it, so a 20 MB line cost 7.7 s of the loop's CPU, growing with the square of its length.
So each answer is cut off past `MAX_ANSWER_BYTES`: a JSON body in total, an event stream
per event (the stream itself stays open for hours), a stdio server's output per line,
handed to the SDK a whole line at a time. fim passes on at most 400,000 characters of
text and 10 MB of media of one result anyway.

Bytes are not the whole cost: each message a reader hands on whole (a JSON body, an
event, a stdio line) is first checked by `fim.mcp.answer_shape.shape_problem`, which counts
its values, objects and levels, and one past them is refused like one past the byte cap.
Nor is one message the whole cost: every reader takes what it hands on from the server's
`fim.mcp.pacing.ReadBudget`, and waits once it has read more than that allows.

A stdio server's process group is killed when its transport closes or the server exits
(`fim.mcp.groups`).

Imported with a server's client only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, Literal

import anyio
import httpx2

from fim.mcp.answer_shape import event_problem, lines_problem, shape_problem
from fim.mcp.groups import end_group_with, stdio_groups, stdio_watchers
from fim.mcp.pacing import ReadBudget

MAX_ANSWER_BYTES = 16 * 2**20

_ENDS = re.compile(rb"(?>\r\n|\n|\r)(?>\r\n|\n|\r)")
"""Where an event of an event stream ends: a blank line, lines ending in CRLF, LF or CR as
the SDK's reader splits them (a CRLF whole: the SDK dispatches an event only once it has
seen its blank line's end, and a CR alone could still be the start of a CRLF)."""


def _too_large(limit: int) -> str:
    most = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"
    return f"the server's answer is larger than {most}, the most fim reads"


class AnswerTooLarge(httpx2.StreamError):
    """The server sent more than fim reads of one answer: more than `MAX_ANSWER_BYTES`, or
    more values, objects or levels than `shape_problem` lets through."""


def capped(
    client: httpx2.AsyncClient,
    limit: int | None = None,
    on_cut: Callable[[str], None] | None = None,
    budget: ReadBudget | None = None,
) -> httpx2.AsyncClient:
    """`client` with every response read at most `limit` bytes an answer (returned for
    chaining), at the pace of `budget`; `on_cut` is told why when it stops reading one. A
    response hook wraps the body's stream before anyone reads it, so it holds whatever
    transport or proxy the client uses."""

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
        response.stream = _Capped(response.stream, most, body, declared, on_cut, budget)

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
        budget: ReadBudget | None = None,
    ) -> None:
        self._stream, self._limit, self._body = stream, limit, body
        self._declared, self._on_cut, self._budget = declared, on_cut, budget

    async def _paced(self, data: bytes, checked: float = 0.0) -> bytes:
        if self._budget is not None:
            await self._budget.take(data, checked)
        return data

    def _cut(self, reason: str | None = None) -> AnswerTooLarge:
        reason = reason or _too_large(self._limit)
        if self._on_cut is not None:
            self._on_cut(reason)
        return AnswerTooLarge(reason)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared > self._limit:  # said so up front: not one byte read
            raise self._cut()
        if self._budget is not None:
            await self._budget.ready()
        if self._body == "events":
            async for events in self._events():
                yield await self._paced(events)
            return
        held, parts = 0, []
        async for chunk in self._stream:
            held += len(chunk)
            if held > self._limit:
                raise self._cut()
            if self._body == "json":
                parts.append(chunk)
            else:
                yield await self._paced(chunk)
        if parts:
            whole = b"".join(parts)
            began = time.perf_counter()
            why = shape_problem(whole)
            if why is not None:
                raise self._cut(why)
            yield await self._paced(whole, time.perf_counter() - began)

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
                why = event_problem(event)
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
        budget: ReadBudget | None = None,
    ) -> None:
        self._inner, self._limit, self._on_cut, self._stop = inner, limit, on_cut, stop
        self._budget = budget
        self._held: list[bytes] = []
        self._size = 0
        self._cut = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._cut:
            return bytes(await self._inner.receive(max_bytes))
        if self._budget is not None:
            await self._budget.ready()
        while True:
            try:
                chunk = await self._inner.receive(max_bytes)
            except anyio.EndOfStream:
                if not self._held:
                    raise
                rest, self._held, self._size = b"".join(self._held), [], 0
                return await self._paced(rest)
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
            began = time.perf_counter()
            why = lines_problem(lines)
            if why is not None:
                raise self._refuse(why)
            return await self._paced(lines, time.perf_counter() - began)

    async def _paced(self, data: bytes, checked: float = 0.0) -> bytes:
        if self._budget is not None:
            await self._budget.take(data, checked)
        return data

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
stdio_budget: ContextVar[ReadBudget | None] = ContextVar("fim_stdio_budget", default=None)
"""The budget `_Lines` reads at: the server's, whose connection is opening it."""


def cap_stdio() -> None:
    """Read every stdio server's output through `_Lines` (`MAX_ANSWER_BYTES` a line, within
    `shape_problem`'s caps): the SDK's process factory, wrapped once. Where the SDK or anyio
    changed the seams this uses, their reading stays as it was (tests/mcp/test_mcp_capped.py
    fails)."""
    # deferred: loading the SDK's stdio client costs hundreds of ms
    from mcp.client import stdio

    made = getattr(stdio, "_create_platform_compatible_process", None)
    if made is None or getattr(made, "capped", False):
        return

    async def spawned(*args: Any, **kwargs: Any) -> Any:
        process = await made(*args, **kwargs)
        groups = stdio_groups.get()
        if groups is not None:
            with contextlib.suppress(ProcessLookupError):  # gone already: it leads no group
                if os.getpgid(process.pid) == process.pid:
                    groups.append(process.pid)
                    watchers = stdio_watchers.get()
                    if watchers is not None:
                        watchers.append(asyncio.create_task(end_group_with(process, process.pid)))
        inner = getattr(process, "_stdout", None)
        if inner is not None:
            group = process.pid  # the SDK starts each server in a session of its own

            def stop() -> None:
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):  # not a group of its own
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()

            process._stdout = _Lines(
                inner, MAX_ANSWER_BYTES, stdio_cut.get(), stop, stdio_budget.get()
            )
        return process

    spawned.capped = True  # type: ignore[attr-defined]
    stdio._create_platform_compatible_process = spawned


class _Reported(logging.Filter):
    """The SDK logs a cut answer with its traceback (on a user's terminal, for `fim run`);
    the call's observation already says why, so those records are dropped. A line of a
    server's output that is not JSON-RPC (a stray `print`) is one line, not a traceback per
    line (attack-55 F4): the SDK ignores it and goes on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.getMessage().startswith("Failed to parse JSONRPC"):
            error = record.exc_info[1]
            given = _line_of(error) if error is not None else None
            record.msg, record.args = (
                "an MCP server wrote a line that is not JSON-RPC: %r",
                (given[:120] if isinstance(given, str) else "(unreadable)",),
            )
            record.exc_info = record.exc_text = None
            return True
        seen = record.exc_info[1] if record.exc_info else None
        while seen is not None:
            if isinstance(seen, AnswerTooLarge | LineRefused):
                return False
            seen = seen.__cause__ or seen.__context__
        return True


def _line_of(error: BaseException) -> object:
    """The line a pydantic `ValidationError` of the SDK's parser was given."""
    errors = getattr(error, "errors", None)
    try:
        found = errors() if callable(errors) else []
    except Exception:  # not pydantic's: nothing to show
        return None
    return found[0].get("input") if found else None


for _name in ("mcp.client.stdio", "mcp.client.streamable_http", "mcp.client.sse"):
    logging.getLogger(_name).addFilter(_Reported())
