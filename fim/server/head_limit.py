"""A request's head (request line and headers) is bounded: past `MAX_HEAD` bytes a 431.

uvicorn's httptools protocol sets no bound on a request's headers (its h11 one does), and
httptools joins a header value that arrives in pieces at a cost that grows with the square
of its length: one keyless connection sending a 100 MiB header held `fim serve`'s event
loop for seconds at a time (`/healthz` answered in 3-7 s instead of 4 ms) and its memory
grew by hundreds of MB (attack-50 F1). `BoundedHead` counts what a request's head has
received and, past the bound, answers 431 and closes the connection before parsing more.
A read is counted before it is parsed and checked after, so the parser sees at most one
read (up to 256 KiB) past the bound. Every byte of a message that is not body counts, not
only the head's: a chunked body's trailer is header fields parsed the same slow way (a
200 MiB trailer after a 401 stalled the loop for 14 s, attack-51 F1), and its chunk-size
lines (with extensions) are allowed `CHUNK_FRAMING` bytes each on top of the bound.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD = 64 * 1024
"""Bytes a request's line and headers may take (nginx's default is 32 KiB, Node's 16), and
its trailer with them."""

CHUNK_FRAMING = 64
"""Bytes a chunk's framing may take (its size line, extensions, the CRLF after its data)."""

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
    """uvicorn's httptools protocol with the part of each request that is not body bounded
    (`MAX_HEAD`, plus `CHUNK_FRAMING` a chunk)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seen = self._body = self._chunks = 0
        """Bytes received since the message began, how many were its body, its chunks."""

    def data_received(self, data: bytes) -> None:
        self._seen += len(data)
        super().data_received(data)
        over = self._seen - self._body > MAX_HEAD + CHUNK_FRAMING * self._chunks
        if over and not self.transport.is_closing():
            log.warning(
                "refused a request from %s: its headers are over %d KiB (431)",
                (self.client or ("?",))[0],
                MAX_HEAD // 1024,
            )
            self.transport.write(_answer())
            self.transport.close()

    def on_message_complete(self) -> None:
        # Reset at the end, not the start: a message's first read is counted whole (reset
        # at its start, a 1 MiB read that began a message counted as nothing).
        self._seen = self._body = self._chunks = 0
        super().on_message_complete()

    def on_body(self, body: bytes) -> None:
        self._body += len(body)
        super().on_body(body)

    def on_chunk_header(self) -> None:
        self._chunks += 1
