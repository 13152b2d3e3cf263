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
            chunk = conn.recv(65536)
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
