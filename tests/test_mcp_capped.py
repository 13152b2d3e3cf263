"""An MCP server over HTTP sends at most `MAX_ANSWER_BYTES` in one answer: a JSON body in
total, an event stream per event (fim/mcp/capped.py). Past it the call fails saying so,
and the server stays usable; below it (a screenshot over SSE, past the SDK's own 1 MiB
event cap) the answer arrives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp_servers.harness import http_demo, stdio_decl

from fim.config.schema import HttpServer, StdioServer
from fim.mcp import capped
from fim.mcp.calls import call_tool
from fim.mcp.manager import McpManager

ROOT = Path(__file__).parent
LIMIT = 64 * 1024


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
    assert await _read(capped._Capped(many, 100, True, 0, None)) == 4900
    split = _chunks(b"data: " + b"z" * 90 + b"\n", b"\ndata: " + b"z" * 90 + b"\r", b"\n\r\n")
    assert await _read(capped._Capped(split, 100, True, 0, None)) == 198
    reasons: list[str] = []
    one_big = _chunks(b"data: " + b"z" * 60, b"z" * 60 + b"\n\n")  # 128 bytes in one event
    with pytest.raises(capped.AnswerTooLarge):
        await _read(capped._Capped(one_big, 100, True, 0, reasons.append))
    assert len(reasons) == 1 and reasons[0].startswith("the server's answer is larger than")
    with pytest.raises(capped.AnswerTooLarge):  # a body is counted whole, newlines or not
        await _read(capped._Capped(_chunks(event, event), 100, False, 0, None))
    with pytest.raises(capped.AnswerTooLarge):  # declared too large: not one byte is read
        await _read(capped._Capped(_chunks(), 100, False, 101, None))


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
    with pytest.raises(capped.LineTooLong):
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
