"""Small loopback HTTP services for tests that need raw control of a response (a header a
real server would not send, a body that is not what its headers say): a stdlib handler
replying through `answer`, served on its own thread by `serving`."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Quiet(BaseHTTPRequestHandler):
    """A handler that keeps the test's output clean (no request log lines)."""

    def log_message(self, format: str, *args: Any) -> None:
        return


def answer(
    handler: BaseHTTPRequestHandler,
    body: bytes,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Send `status`, `headers` (JSON when None; `{}` sends none) and `body` with its length."""
    handler.send_response(status)
    chosen = {"Content-Type": "application/json"} if headers is None else headers
    for name, value in chosen.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serving(
    handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0
) -> Iterator[ThreadingHTTPServer]:
    """`handler` served on `host:port` (a free port by default) until the block ends."""
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def post_scope(path: str, length: int, key: str = "key-a") -> dict[str, Any]:
    """The ASGI scope uvicorn hands an app for `POST path` with a JSON body of `length`
    bytes and `key` as bearer (ASGI 3.0, spec 2.3: Starlette cancels a stream whose client
    sent `http.disconnect`), for tests that drive `receive` and `send` themselves."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 5555),
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(length).encode()),
        ],
    }
