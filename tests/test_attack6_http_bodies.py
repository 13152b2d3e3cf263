"""Attack round 6: what a third-party HTTP server's response headers make fim do.

A response's `charset` names the codec its body is decoded with. Python's codec registry
holds more than text encodings: `punycode` decodes in quadratic time (1.6 MB took 42 s, on
the event loop: /healthz of a `fim serve` answered after the whole decode) and `rot13`
is not a text encoding at all (the tool failed with a LookupError). A body is text in a
web encoding, or it is read as UTF-8."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace

import pytest
from http_stubs import Quiet, answer, serving

from fim.config.schema import HttpConnector, WebFetchSettings
from fim.connectors.http import HttpConnectorClient
from fim.tools.builtin import web_fetch

PUNY = b"caf-dma"
"""`café` in punycode; read as UTF-8 it is the same seven characters."""


def _handler(charset: str) -> type[BaseHTTPRequestHandler]:
    class Handler(Quiet):
        def do_GET(self) -> None:
            body = PUNY if charset == "punycode" else b"hello"
            answer(self, body, headers={"Content-Type": f"text/plain; charset={charset}"})

    return Handler


def _connector(port: int) -> HttpConnectorClient:
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": f"http://127.0.0.1:{port}",
            "actions": {"get": {"method": "GET", "path": "/x"}},
        }
    )
    return HttpConnectorClient("api", decl)


@pytest.mark.xfail(
    strict=True, reason="attack-6 #1: the body is decoded with any codec the charset names"
)
@pytest.mark.parametrize("charset", ["punycode", "rot13"])
async def test_a_connector_reads_a_body_in_a_non_text_codec_as_utf8(charset: str) -> None:
    with serving(_handler(charset)) as server:
        client = _connector(server.server_address[1])
        try:
            result = await client.call("get", {})
        finally:
            await client.aclose()
    expected = PUNY.decode() if charset == "punycode" else "hello"
    assert expected in result.content


@pytest.mark.xfail(
    strict=True, reason="attack-6 #1: web_fetch decodes with any codec the charset names"
)
@pytest.mark.parametrize("charset", ["punycode", "rot13"])
async def test_web_fetch_reads_a_page_in_a_non_text_codec_as_utf8(charset: str) -> None:
    settings = WebFetchSettings(allow_hosts=["127.0.0.1"])
    ctx = SimpleNamespace(snapshot=SimpleNamespace(project=SimpleNamespace(web_fetch=settings)))
    tool = web_fetch.make(ctx)  # type: ignore[arg-type]
    with serving(_handler(charset)) as server:
        got = await tool.fn(url=f"http://127.0.0.1:{server.server_address[1]}/x")
    text = got if isinstance(got, str) else got.content
    expected = PUNY.decode() if charset == "punycode" else "hello"
    assert expected in text
