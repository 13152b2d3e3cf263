"""The benchmarks' floor endpoint: the stub model reply on a bare asyncio HTTP/1.1 server.

`fim.testing.model_server` (Starlette on uvicorn) is what tests use. For the separate
stub process of the agent benchmarks it costs 2-3x the CPU per request of a bare asyncio
server (measured: ~110-150 us vs ~250-450 us per reply), CPU the stub then takes from the
client being measured on a two-core machine. So the benchmarks keep this floor here, and
only here: keep-alive, Content-Length request bodies, a handler's reply as JSON or as one
SSE body (`fim.testing.stub_wire`). Everything else a test needs lives in the real stub.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

from fim.testing.stub_wire import error_body, stream_body

Handler = Callable[[dict[str, Any]], dict[str, Any]]


def _response(status: int, body: bytes, kind: str) -> bytes:
    head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\ncontent-type: {kind}\r\n"
    return (head + f"content-length: {len(body)}\r\n\r\n").encode() + body


async def _connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler, latency: float
) -> None:
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                key, _, value = line.partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value)
            body = await reader.readexactly(length) if length else b""
            if latency:
                await asyncio.sleep(latency)
            try:
                request = json.loads(body)
                reply = handler(request)
            except Exception as exc:  # shown to the client, as the real stub does
                data = json.dumps(error_body(500, f"stub handler failed: {exc}")).encode()
                writer.write(_response(500, data, "application/json"))
            else:
                if request.get("stream"):
                    usage = bool((request.get("stream_options") or {}).get("include_usage"))
                    writer.write(_response(200, stream_body(reply, usage), "text/event-stream"))
                else:
                    writer.write(_response(200, json.dumps(reply).encode(), "application/json"))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def serve(handler: Handler, latency: float, ready: Callable[[str], None]) -> None:
    """Serve until cancelled; `ready(base_url)` once listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    server = await asyncio.start_server(
        lambda r, w: _connection(r, w, handler, latency), sock=sock, limit=2**22
    )
    ready(f"http://127.0.0.1:{sock.getsockname()[1]}/v1")
    async with server:
        await server.serve_forever()
