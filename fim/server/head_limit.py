"""A request's head (request line and headers) is bounded: past `MAX_HEAD` bytes a 431.

uvicorn's httptools protocol sets no bound on a request's headers (its h11 one does), and
httptools joins a header value that arrives in pieces at a cost that grows with the square
of its length: one keyless connection sending a 100 MiB header held `fim serve`'s event
loop for seconds at a time (`/healthz` answered in 3-7 s instead of 4 ms) and its memory
grew by hundreds of MB (attack-50 F1). `BoundedHead` counts what a request's head has
received and, past the bound, answers 431 and closes the connection before parsing more.
A chunk is counted before it is parsed and checked after, so the parser sees at most one
read (64 KiB) past the bound; bytes after the head (a body) are not counted.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD = 64 * 1024
"""Bytes a request's line and headers may take (nginx's default is 32 KiB, Node's 16)."""

log = logging.getLogger("fim.server")


def _answer() -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": f"the request's headers are over {MAX_HEAD // 1024} KiB",
                "type": "invalid_request_error",
                "param": "headers",
                "code": "request_header_fields_too_large",
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedHead(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head of each request bounded (`MAX_HEAD`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the first request's line and headers come first
        self._head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > MAX_HEAD and not self.transport.is_closing():
            log.warning(
                "refused a request from %s: its headers are over %d KiB (431)",
                (self.client or ("?",))[0],
                MAX_HEAD // 1024,
            )
            self.transport.write(_answer())
            self.transport.close()

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()
