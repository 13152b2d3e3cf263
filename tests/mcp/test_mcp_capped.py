"""An MCP server over HTTP sends at most `MAX_ANSWER_BYTES` in one answer: a JSON body in
total, an event stream per event (fim/mcp/capped.py). Past it the call fails saying so,
and the server stays usable; below it (a screenshot over SSE, past the SDK's own 1 MiB
event cap) the answer arrives. The same holds for what an answer holds, counted before the
SDK parses it on the event loop: at most `MAX_OBJECTS` objects and arrays, `MAX_VALUES`
values, `MAX_DEPTH` levels."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import mcp_types
import pytest

from fim.config.schema import HttpServer, StdioServer
from fim.mcp import answer_shape, capped
from fim.mcp.calls import call_tool
from fim.mcp.errors import McpResultRejected, McpUnavailable
from fim.mcp.jobs import Job
from fim.mcp.manager import McpManager
from tests.mcp_servers.harness import http_demo, stdio_decl

ROOT = Path(__file__).parents[1]
LIMIT = 64 * 1024
BULKY = ROOT / "mcp_servers" / "bulky.py"
HOSTILE = ROOT / "mcp_servers" / "hostile.py"


@pytest.fixture(params=["sse", "json", "stdio"])
async def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(capped, "MAX_ANSWER_BYTES", LIMIT)
    manager = McpManager(ROOT)
    if request.param == "stdio":
        yield manager.connection("local", StdioServer(**stdio_decl()), ROOT)
    else:
        with http_demo(json=request.param == "json") as url:
            yield manager.connection("web", HttpServer(url=f"{url}/mcp"), ROOT)
    await manager.aclose()


async def test_an_answer_past_the_limit_fails_its_call_and_the_server_stays_usable(server, caplog):
    conn = server
    fits = await call_tool(conn, "echo", {"text": "x" * (LIMIT // 4)})
    assert not fits.is_error and fits.content == "x" * (LIMIT // 4)
    cut = await call_tool(conn, "echo", {"text": "x" * (LIMIT * 2)})
    assert cut.is_error
    assert "the server's answer is larger than 64 KiB, the most fim reads" in cut.content
    assert "answered, and its answer was not used" in cut.content
    after = await call_tool(conn, "add", {"a": 20, "b": 22})
    assert not after.is_error and after.content == "42"
    # the SDK logs the cut with a traceback (on a `fim run` user's terminal): not kept
    assert not [r for r in caplog.records if r.name.startswith("mcp.") and r.exc_info]


async def test_an_answer_past_the_sdks_event_cap_arrives_whole(monkeypatch):
    """The SDK cuts an SSE event at 1 MiB and reports it as a server that went away: a 2 MB
    screenshot failed. fim's own cap (16 MiB) is the one that applies."""
    manager = McpManager(ROOT)
    with http_demo() as url:
        conn = manager.connection("web", HttpServer(url=f"{url}/mcp"), ROOT)
        text = "y" * 2_000_000
        result = await call_tool(conn, "echo", {"text": text})
        await manager.aclose()
    assert not result.is_error and len(result.content) == len(text)


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _read(stream: capped._Capped) -> int:
    return sum([len(chunk) async for chunk in stream])


async def test_an_event_stream_is_capped_per_event_however_it_is_chunked():
    event = b"data: " + b"z" * 90 + b"\n\n"  # 98 bytes
    many = _chunks(*[event] * 50)  # 4,900 bytes in all, each event under the limit
    assert await _read(capped._Capped(many, 100, "events", 0, None)) == 4900
    split = _chunks(b"data: " + b"z" * 90 + b"\n", b"\ndata: " + b"z" * 90 + b"\r", b"\n\r\n")
    assert await _read(capped._Capped(split, 100, "events", 0, None)) == 198
    reasons: list[str] = []
    one_big = _chunks(b"data: " + b"z" * 60, b"z" * 60 + b"\n\n")  # 128 bytes in one event
    with pytest.raises(capped.AnswerTooLarge):
        await _read(capped._Capped(one_big, 100, "events", 0, reasons.append))
    assert len(reasons) == 1 and reasons[0].startswith("the server's answer is larger than")
    with pytest.raises(capped.AnswerTooLarge):  # a body is counted whole, newlines or not
        await _read(capped._Capped(_chunks(event, event), 100, "json", 0, None))
    with pytest.raises(capped.AnswerTooLarge):  # declared too large: not one byte is read
        await _read(capped._Capped(_chunks(), 100, "json", 101, None))


async def test_a_stdio_servers_output_reaches_the_sdk_a_whole_line_at_a_time():
    """The SDK joins each chunk of a line to the part before it (a 20 MB line cost 7.7 s of
    the loop's CPU): it now gets whole lines, however the pipe chunks them."""
    stopped: list[bool] = []

    class Pipe:
        def __init__(self, *chunks: bytes) -> None:
            self.chunks = list(chunks)

        async def receive(self, max_bytes: int = 65536) -> bytes:
            if not self.chunks:
                raise anyio.EndOfStream
            return self.chunks.pop(0)

        async def aclose(self) -> None:
            pass

    lines = capped._Lines(Pipe(b'{"a":', b'1}\n{"b"', b":2}\n{", b"}\n", b"tail"), 100, None, list)
    assert [await lines.receive() for _ in range(4)] == [
        b'{"a":1}\n',
        b'{"b":2}\n',
        b"{}\n",
        b"tail",
    ]
    with pytest.raises(anyio.EndOfStream):
        await lines.receive()
    reasons: list[str] = []
    long = capped._Lines(
        Pipe(b"x" * 60, b"x" * 60 + b"\n", b"after"), 100, reasons.append,
        lambda: stopped.append(True),
    )  # fmt: skip
    with pytest.raises(capped.LineRefused):
        await long.receive()
    assert stopped == [True] and reasons[0].startswith("the server's answer is larger than")
    assert await long.receive() == b"after"  # the rest passes raw, for the SDK to drop


async def test_a_compressed_answer_is_refused_before_it_is_inflated():
    """The cap counts the bytes that arrive; an answer compressed on the wire would be
    inflated past it (`gzip, gzip`: a few KB of body, gigabytes decoded). fim asks for
    `identity`, and an answer encoded anyway is refused unread."""
    import gzip

    import httpx2

    bomb = gzip.compress(gzip.compress(b"0" * 50_000_000))  # ~50 KB on the wire
    asked: list[str] = []

    class Wire(httpx2.AsyncByteStream):  # as the network hands a body over: unread
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield bomb

    def answer(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.headers.get("accept-encoding", ""))
        headers = {"content-encoding": "gzip, gzip", "content-type": "application/json"}
        return httpx2.Response(200, headers=headers, stream=Wire())

    reasons: list[str] = []
    client = capped.capped(
        httpx2.AsyncClient(transport=httpx2.MockTransport(answer)), on_cut=reasons.append
    )
    async with client:
        with pytest.raises(capped.AnswerTooLarge, match="'gzip, gzip'-encoded answer"):
            await client.post("http://mcp.test/mcp", json={})
    assert asked == ["identity"]
    assert reasons and "does not read" in reasons[0]


@pytest.fixture(params=["sse", "json", "stdio"])
async def bulky(request: pytest.FixtureRequest):
    manager = McpManager(ROOT)
    if request.param == "stdio":
        yield manager.connection(
            "local", StdioServer(command=sys.executable, args=[str(BULKY)]), ROOT
        )
    else:
        with http_demo(json=request.param == "json", script=BULKY) as url:
            yield manager.connection("web", HttpServer(url=f"{url}/mcp"), ROOT)
    await manager.aclose()


def _sdk_tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("mcp.") and r.exc_info]


async def test_an_answer_past_the_object_or_depth_cap_fails_its_call_and_the_server_stays_usable(
    bulky, caplog, monkeypatch
):
    """500,000 empty text blocks (15 MB, under the byte cap) held the event loop 5 s while
    the SDK parsed and validated them; they are counted, and refused, before it does. So is
    an answer nested past 128 levels. Each fails its own call; the server serves the next."""
    monkeypatch.setattr(answer_shape, "MAX_OBJECTS", 1_000)
    fits = await call_tool(bulky, "blocks", {"count": 900})
    assert not fits.is_error
    refused = await call_tool(bulky, "blocks", {"count": 1_001})
    assert refused.is_error
    assert "answered, and its answer was not used" in refused.content
    assert "the server's answer holds more than 1,000 objects and arrays, the most fim reads" in (
        refused.content
    )
    after = await call_tool(bulky, "echo", {"text": "still here"})
    assert not after.is_error and after.content == "still here"
    # a call sent after the refusal that the connection's end fails later is not told the
    # refusal's reason (an SSE stream resumed after it set the reason again)
    later = Job("call", asyncio.get_running_loop().create_future(), sent=True)
    assert not isinstance(bulky._lost_error(later), McpResultRejected)

    # a structured result past 64 levels fails fim's own check of it (fim/mcp/checks.py)
    deep = await call_tool(bulky, "nested", {"depth": 50})
    assert not deep.is_error
    refused = await call_tool(bulky, "nested", {"depth": answer_shape.MAX_DEPTH + 1})
    assert refused.is_error
    assert "the server's answer is nested deeper than 128 levels, the most fim reads" in (
        refused.content
    )
    assert (await call_tool(bulky, "echo", {"text": "ok"})).content == "ok"
    assert not _sdk_tracebacks(caplog)


async def test_an_answer_past_the_sdks_own_depth_limit_fails_its_call_at_once(caplog):
    """The SDK's parser gives up at 200 levels and drops the line, logging a traceback: the
    call waited out its whole timeout. It is refused before the parser sees it now, and the
    call told so."""
    manager = McpManager(ROOT)
    decl = StdioServer(command=sys.executable, args=[str(HOSTILE), "deep", "300"], timeout=20)
    conn = manager.connection("hostile", decl, ROOT)
    result = await call_tool(conn, "bad", {})
    after = await call_tool(conn, "echo", {"text": "ok"})
    await manager.aclose()
    assert result.content == (
        "Error: MCP tool 'bad' of server 'hostile' answered, and its answer was not used: the "
        "server's answer is nested deeper than 128 levels, the most fim reads; the connection "
        "is opened again"
    )
    assert after.content == "ok"
    assert not _sdk_tracebacks(caplog)


async def test_a_tool_list_past_the_sdks_depth_limit_fails_the_start_at_once():
    """A schema nested past the parser's limit made the start wait out its 30 s."""
    manager = McpManager(ROOT)
    decl = StdioServer(command=sys.executable, args=[str(HOSTILE), "deeptools", "300"])
    conn = manager.connection("hostile", decl, ROOT)
    with pytest.raises(McpUnavailable) as failed:
        await conn.start()
    await manager.aclose()
    assert str(failed.value).startswith(
        "the server's answer is nested deeper than 128 levels, the most fim reads [command: "
    )


def test_the_depth_cap_is_below_the_sdks_own_parser_limit():
    """Whatever passes the cap, the SDK parses: a line it dropped would leave its request
    waiting (this fails if a new SDK parses less deep)."""
    levels = answer_shape.MAX_DEPTH - 2  # the message and its result are the other two
    value = "[" * levels + "]" * levels
    line = f'{{"jsonrpc":"2.0","id":1,"result":{{"content":[],"structuredContent":{value}}}}}'
    assert answer_shape.shape_problem(line.encode()) is None
    assert mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False).id == 1
    assert answer_shape.shape_problem(f"[{line}]".encode()) is not None


def test_what_strings_hold_is_not_counted():
    """A text block of source code or of a JSON document holds any number of braces,
    brackets, commas and escaped quotes; only the answer's own structure counts."""
    code = 'if (a) { b[1, "2"]; } \\ ' * 200_000 + "{" * 300
    answer = json.dumps({"content": [{"type": "text", "text": code}]}).encode()
    assert answer_shape.shape_problem(answer) is None
    # a string that ends in an escaped backslash ends there: what follows it is counted
    after = b'["\\\\",' + b"[" * 200 + b"]" * 200 + b"]"
    assert answer_shape.shape_problem(after) == (
        "the server's answer is nested deeper than 128 levels, the most fim reads"
    )


def _objects(count: int) -> bytes:
    return b"[" + b"{}," * (count - 2) + b"{}]"  # and the array


def _values(count: int) -> bytes:
    return b"[" + b"1," * (count - 1) + b"1]"


def _levels(count: int) -> bytes:
    return b"[" * count + b"]" * count


@pytest.mark.parametrize(
    ("made", "cap", "reason"),
    [
        (_objects, answer_shape.MAX_OBJECTS, "holds more than 50,000 objects and arrays"),
        (_values, answer_shape.MAX_VALUES, "holds more than 1,000,000 values"),
        (_levels, answer_shape.MAX_DEPTH, "is nested deeper than 128 levels"),
    ],
)
def test_an_answer_at_a_cap_is_read_and_one_past_it_refused_naming_it(made, cap, reason):
    assert answer_shape.shape_problem(made(cap)) is None
    assert answer_shape.shape_problem(made(cap + 1)) == (
        f"the server's answer {reason}, the most fim reads"
    )


def test_strings_count_as_values_and_an_unclosed_answer_as_deep_as_it_opens():
    strings = b"[" + b'"",' * 1_000_000 + b'""]'
    assert answer_shape.shape_problem(strings) == (
        "the server's answer holds more than 1,000,000 values, the most fim reads"
    )
    assert answer_shape.shape_problem(b'{"a":' * 129) == (
        "the server's answer is nested deeper than 128 levels, the most fim reads"
    )


async def test_each_stdio_line_is_counted_on_its_own(monkeypatch):
    """A stdio server's lines are parsed one by one: a quote one line leaves open must not
    make the next line's structure look like a string."""
    monkeypatch.setattr(answer_shape, "MAX_OBJECTS", 100)
    stopped: list[bool] = []
    reasons: list[str] = []
    many = b"[" + b"[]," * 100 + b"[]]\n"

    class Pipe:
        def __init__(self, *chunks: bytes) -> None:
            self.chunks = list(chunks)

        async def receive(self, max_bytes: int = 65536) -> bytes:
            return self.chunks.pop(0)

        async def aclose(self) -> None:
            pass

    lines = capped._Lines(
        Pipe(b'{"a":1}\n"open\n' + many), 1 << 20, reasons.append, lambda: stopped.append(True)
    )
    with pytest.raises(capped.LineRefused, match="more than 100 objects and arrays"):
        await lines.receive()
    assert stopped == [True] and reasons == [
        "the server's answer holds more than 100 objects and arrays, the most fim reads"
    ]
    fewer = b"[" + b"[]," * 50 + b"[]]\n"
    fine = capped._Lines(Pipe(b'{"a":1}\n"open\n' + fewer), 1 << 20, None, list)
    assert await fine.receive() == b'{"a":1}\n"open\n' + fewer


async def test_an_event_reaches_the_sdk_whole_once_its_data_is_counted():
    """The SDK parses an event when its blank line arrives; it gets the event then, and
    only if its data (not its other fields: `id: "` opens no string) is within the caps."""
    reasons: list[str] = []
    split = _chunks(b'event: message\r\ndata: {"a"', b":1}\r", b"\n\r\ndata: 2", b"\r\r")
    assert [c async for c in capped._Capped(split, 1000, "events", 0, None)] == [
        b'event: message\r\ndata: {"a":1}\r\n\r\n',
        b"data: 2\r\r",
    ]
    # a CR the last chunk ended with may be half a CRLF: the LF is handed on when it comes
    crlf = _chunks(b"data: 1\r\n\r", b"\n", b"data: 2\n\n")
    assert [c async for c in capped._Capped(crlf, 1000, "events", 0, None)] == [
        b"data: 1\r\n\r",
        b"\n",
        b"data: 2\n\n",
    ]
    deep = b'id: "\ndata: ' + b"[" * 100 + b"\ndata: " + b"[" * 100 + b"]" * 200 + b"\n\n"
    with pytest.raises(capped.AnswerTooLarge, match="nested deeper than 128 levels"):
        await _read(
            capped._Capped(_chunks(b"data: 1\n\n", deep), 1 << 20, "events", 0, reasons.append)
        )
    assert reasons == ["the server's answer is nested deeper than 128 levels, the most fim reads"]
    assert capped.body_of("Text/Event-Stream; charset=utf-8") == "events"
    # the SDK's reader handles each line of an event in Python, empty ones too
    assert answer_shape.event_problem(b"data:\n" * 50_001 + b"\n") == (
        "the server's answer holds more than 50,000 lines in one event, the most fim reads"
    )


async def test_a_json_body_is_counted_whole_and_other_bodies_are_not_read_as_json():
    deep = [b"[" * 100, b"[" * 100 + b"]" * 200]
    with pytest.raises(capped.AnswerTooLarge, match="nested deeper than 128 levels"):
        await _read(capped._Capped(_chunks(*deep), 1 << 20, "json", 0, None))
    assert await _read(capped._Capped(_chunks(*deep), 1 << 20, "other", 0, None)) == 400
    assert capped.body_of("application/json; charset=utf-8") == "json"
