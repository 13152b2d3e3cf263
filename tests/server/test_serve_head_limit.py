"""`fim serve` bounds a request's headers (attack-50 F1): past 64 KiB a 431 and the
connection closed, before the parser builds the rest. uvicorn's httptools protocol set no
bound, and one keyless connection sending a 100 MiB header held the event loop for seconds
at a time (httptools joins a value arriving in pieces at a cost growing with its square).
The bound is per request: a connection kept alive for many requests is not cut by their sum.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from fim.server.head_limit import MAX_HEAD
from fim.testing.server import fim_server


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    root = tmp_path_factory.mktemp("p")
    (root / "agents").mkdir()
    (root / "fim.yaml").write_text('name: heads\nstate: "sqlite:///.fim/state.db"\n')
    with fim_server(root) as (url, _proc):
        yield int(url.rsplit(":", 1)[1])


def request(header: int) -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * header + b"\r\n\r\n"


def exchange(port: int, *requests: bytes, answers: int = 1) -> bytes:
    """Send the requests on one connection; what came back until `answers` status lines
    were read or the server closed it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        try:
            for data in requests:
                conn.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed it mid-send: its answer is what it read
        got = b""
        while got.count(b"HTTP/1.1 ") < answers or not got.endswith((b"}", b"\n")):
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break  # closed with bytes of ours unread: what came before is the answer
            if not chunk:
                break
            got += chunk
        return got


def test_a_header_over_the_bound_is_a_431_and_the_connection_closes(port: int) -> None:
    answer = exchange(port, request(4 * MAX_HEAD))
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b'"param": "headers"' in answer and b"connection: close" in answer


def test_headers_under_the_bound_are_served(port: int) -> None:
    assert exchange(port, request(MAX_HEAD // 2)).startswith(b"HTTP/1.1 200 ")


def test_the_bound_is_per_request_on_a_kept_alive_connection(port: int) -> None:
    three = [request(MAX_HEAD // 2)] * 3  # 96 KiB of headers in all
    answer = exchange(port, *three, answers=3)
    assert answer.count(b"HTTP/1.1 200 ") == 3


def chunked(body: bytes, size: int, trailer: bytes = b"") -> bytes:
    head = (
        b"POST /v1/agents/x/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return head + framed + b"0\r\n" + trailer + b"\r\n"


def test_a_chunked_bodys_trailer_counts_toward_the_bound(port: int) -> None:
    """attack-51 F1: the head was counted, the trailer after the body was not; a 200 MiB
    trailer after the server's 401 held the loop for 14 s. It is header fields like the
    head, parsed as slowly."""
    trailer = b"X-Trailer: " + b"a" * (4 * MAX_HEAD) + b"\r\n"
    answer = exchange(port, chunked(b"{}", 2, trailer), answers=2)
    assert b"HTTP/1.1 431 " in answer and b"connection: close" in answer


def test_a_body_sent_in_many_small_chunks_is_not_taken_for_headers(port: int) -> None:
    """Chunk framing is allowed per chunk: 128 KiB of JSON in 16-byte chunks carries more
    framing than the bound, and is a body, not a flood."""
    body = b'{"input": "' + b"a" * (128 * 1024) + b'"}'
    answer = exchange(port, chunked(body, 16))
    assert answer.startswith(b"HTTP/1.1 ") and b" 431 " not in answer.split(b"\r\n")[0]
