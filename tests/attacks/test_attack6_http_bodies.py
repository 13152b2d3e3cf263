"""Attack round 6: what a third-party HTTP server's response makes fim do.

A response's `charset` names the codec its body is decoded with. Python's codec registry
holds more than text encodings: `punycode` decodes in quadratic time (1.6 MB took 42 s, on
the event loop: /healthz of a `fim serve` answered after the whole decode) and `rot13`
is not a text encoding at all (the tool failed with a LookupError). A body is text in a
web encoding, or it is read as UTF-8.

An 8 MiB JSON body was parsed and rendered on the event loop (3 s for 2 million tiny
arrays): a large body is read in a killable worker. And httpx's timeout bounds each network
read, so a server sending a byte at a time held a workflow node for ever: the connector's
`timeout` (web_fetch's `TIMEOUT`) bounds the whole request."""

from __future__ import annotations

import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace
from typing import Any

import pytest

from fim.config.schema import HttpConnector, WebFetchSettings
from fim.connectors import http_observation
from fim.connectors.http import HttpConnectorClient
from fim.tools import isolate
from fim.tools.base import FunctionTool
from fim.tools.builtin import web_fetch
from tests.http_stubs import Quiet, answer, serving

PUNY = b"caf-dma"
"""`café` in punycode; read as UTF-8 it is the same seven characters."""


def _handler(charset: str) -> type[BaseHTTPRequestHandler]:
    class Handler(Quiet):
        def do_GET(self) -> None:
            body = PUNY if charset == "punycode" else b"hello"
            answer(self, body, headers={"Content-Type": f"text/plain; charset={charset}"})

    return Handler


def _serving_body(body: bytes, content_type: str) -> type[BaseHTTPRequestHandler]:
    class Handler(Quiet):
        def do_GET(self) -> None:
            answer(self, body, headers={"Content-Type": content_type})

    return Handler


class Trickle(Quiet):
    """Announces 100 bytes and sends one every 50 ms: no read waits long, the whole takes 5 s."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "100")
        self.end_headers()
        try:
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:  # the client gave up: what the test expects
            return


def _connector(port: int, **settings: Any) -> HttpConnectorClient:
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": f"http://127.0.0.1:{port}",
            "actions": {"get": {"method": "GET", "path": "/x"}},
            **settings,
        }
    )
    return HttpConnectorClient("api", decl)


async def _call(port: int, **settings: Any) -> str:
    client = _connector(port, **settings)
    try:
        result = await client.call("get", {})
    finally:
        await client.aclose()
    return result.content


def _web_fetch() -> FunctionTool:
    settings = WebFetchSettings(allow_hosts=["127.0.0.1"])
    ctx = SimpleNamespace(snapshot=SimpleNamespace(project=SimpleNamespace(web_fetch=settings)))
    return web_fetch.make(ctx)  # type: ignore[arg-type]


async def _fetch(port: int) -> str:
    got = await _web_fetch().fn(url=f"http://127.0.0.1:{port}/x")
    return got if isinstance(got, str) else got.content


def _recording(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """The names of the functions `isolate.<name>` is handed (it still runs them)."""
    handed: list[str] = []
    real: Callable[..., Any] = getattr(isolate, name)

    async def recorded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        handed.append(fn.__name__)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(isolate, name, recorded)
    return handed


# ---------------------------------------------------------------- 1: the body's charset


@pytest.mark.parametrize("charset", ["punycode", "rot13"])
async def test_a_connector_reads_a_body_in_a_non_text_codec_as_utf8(charset: str) -> None:
    with serving(_handler(charset)) as server:
        content = await _call(server.server_address[1])
    expected = PUNY.decode() if charset == "punycode" else "hello"
    assert expected in content


@pytest.mark.parametrize("charset", ["punycode", "rot13"])
async def test_web_fetch_reads_a_page_in_a_non_text_codec_as_utf8(charset: str) -> None:
    with serving(_handler(charset)) as server:
        text = await _fetch(server.server_address[1])
    expected = PUNY.decode() if charset == "punycode" else "hello"
    assert expected in text


async def test_a_body_in_a_web_encoding_is_read_in_it() -> None:
    handler = _serving_body("café €".encode("cp1252"), "text/plain; charset=ISO-8859-1")
    with serving(handler) as server:
        port = server.server_address[1]
        assert "café €" in await _call(port)
        assert "café €" in await _fetch(port)


# ---------------------------------------------------------------- 3: large bodies


async def test_a_large_json_response_is_parsed_and_rendered_in_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed = _recording(monkeypatch, "call")
    items = http_observation.IN_LOOP_BYTES // 3 + 1
    body = b"[" + b",".join([b"[7]"] * items) + b"]"
    with serving(_serving_body(body, "application/json")) as server:
        content = await _call(server.server_address[1], max_response_chars=200)
    assert handed == ["_observed"]
    assert content.startswith("[[7], [7]")
    assert f"({items} in total" in content


async def test_a_small_json_response_is_rendered_without_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed = _recording(monkeypatch, "call")
    with serving(_serving_body(b'{"id": 7}', "application/json")) as server:
        content = await _call(server.server_address[1])
    assert handed == []
    assert content == '{"id": 7}'


async def test_web_fetch_reads_a_large_plain_page_in_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed = _recording(monkeypatch, "run")
    body = "wörd ".encode("utf-16-le") * (web_fetch.IN_LOOP_BYTES // 10 + 1)
    with serving(_serving_body(body, "text/plain; charset=utf-16le")) as server:
        text = await _fetch(server.server_address[1])
    assert handed == ["_page"]
    assert "wörd wörd" in text


# ---------------------------------------------------------------- 6: a deadline for it all


async def test_a_connector_request_ends_at_its_timeout_however_the_bytes_trickle() -> None:
    with serving(Trickle) as server:
        content = await _call(server.server_address[1], timeout=0.5, retries=0)
    assert content.startswith("Error: api__get timed out after 0.5s, the connector's timeout")
    assert "was still sending its response" in content


async def test_web_fetch_ends_at_its_timeout_however_the_bytes_trickle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(web_fetch, "TIMEOUT", 0.5)
    with serving(Trickle) as server:
        text = await _fetch(server.server_address[1])
    assert "timed out after 0.5s, the limit for a whole fetch" in text
