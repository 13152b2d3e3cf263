"""Where fim's own HTTP clients connect: to the address their guard checked, or to a proxy.

`web_fetch` and HTTP connectors resolve a host once, refuse internal addresses, and connect
to the address they checked (DNS pinning), so a name answering a public address to the check
and 127.0.0.1 to the connection (DNS rebinding) reaches nothing internal. A proxy named by
the environment resolves names itself, so a request it carries is not pinned; every request
it does not carry (an http:// URL when only `HTTPS_PROXY` is set, a `NO_PROXY` match) still
is. An HTTP connector's own host is judged once, internal or public: a public one never
connects to an internal address later, so its credentials never go there.

Offline: "public" is 127.0.0.2 (the guard's ruling patched to pass it), "internal" is a
service on 127.0.0.1, DNS answers come from a patched `getaddrinfo`, and the proxy is a
fake one on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, HttpConnector, Project, WebFetchSettings
from fim.connectors.http import get_client
from fim.connectors.http_tool import action_tool
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin
from fim.tools.builtin import web_fetch
from fim.types import ToolResult

_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
_TOKEN = "tok-0123456789abcdef"


class _Service(BaseHTTPRequestHandler):
    """Answers with the address it was reached on; `/hop` redirects to `rebind.test`."""

    seen: list[tuple[str, str, str | None]] = []
    """(address reached, request target, Authorization) of every request."""

    def do_GET(self) -> None:
        address = str(self.connection.getsockname()[0])
        _Service.seen.append((address, self.path, self.headers.get("Authorization")))
        if self.path.endswith("/hop"):
            self.send_response(302)
            port = self.server.server_address[1]
            self.send_header("Location", f"http://rebind.test:{port}/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = f'{{"served_by": "{address}"}}'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _serve(address: str, port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, port), _Service)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


@pytest.fixture
def port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """An internal service on 127.0.0.1 and a "public" one on 127.0.0.2, on one port; and
    a clean proxy environment."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    internal = _serve("127.0.0.1")
    public = _serve("127.0.0.2", internal.server_address[1])
    ruling = web_fetch._why_blocked
    monkeypatch.setattr(
        web_fetch, "_why_blocked", lambda ip: None if str(ip) == "127.0.0.2" else ruling(ip)
    )
    _Service.seen.clear()
    yield internal.server_address[1]
    for server in (internal, public):
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy() -> Iterator[str]:
    """A fake forward proxy on 127.0.0.1: it answers every request itself, from "proxy"."""

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            _Service.seen.append(("proxy", self.path, self.headers.get("Authorization")))
            body = b'{"served_by": "proxy"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> list[str]:
    """Each name answers its list's addresses in turn, the last one for ever after; the
    names asked, in order, are returned."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    asked: list[str] = []
    given = {name: 0 for name in answers}

    async def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host  # anyio asks in IDNA bytes
        if name not in answers:
            return await real(host, port, *args, **kwargs)
        asked.append(name)
        address = answers[name][min(given[name], len(answers[name]) - 1)]
        given[name] += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(loop, "getaddrinfo", resolve)
    return asked


async def _fetch(tmp_path: Path, url: str) -> ToolResult:
    ctx = RunContext(
        snapshot=Snapshot(root=tmp_path, project=Project(web_fetch=WebFetchSettings())),
        agent=AgentDecl(name="tester", tools=["web_fetch"]),
        services=Services(providers=CAPABILITIES, root=tmp_path),
    )
    return await ToolRegistry(builtin.provide(ctx).tools).call("web_fetch", {"url": url})


def _reached() -> list[str]:
    return [address for address, _, _ in _Service.seen]


@pytest.mark.parametrize(
    "environment",
    [
        {"HTTPS_PROXY": "{proxy}"},
        {"HTTP_PROXY": "{proxy}", "NO_PROXY": "rebind.test"},
        {"ALL_PROXY": "{proxy}", "NO_PROXY": "example.org,.test"},
        {"HTTP_PROXY": "{proxy}", "NO_PROXY": "*"},
    ],
    ids=["https-proxy-only", "no-proxy-match", "all-proxy-no-proxy-suffix", "no-proxy-star"],
)
async def test_a_fetch_no_proxy_carries_connects_only_to_the_address_the_guard_checked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    port: int,
    proxy: str,
    environment: dict[str, str],
) -> None:
    """A proxy variable that does not cover the URL leaves the fetch direct, and pinned:
    the second DNS answer (127.0.0.1) is refused, never connected to."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value.format(proxy=proxy))
    asked = _dns(monkeypatch, {"rebind.test": ["127.0.0.2", "127.0.0.1"]})
    result = await _fetch(tmp_path, f"http://rebind.test:{port}/")
    assert asked == ["rebind.test", "rebind.test"]  # the guard's check, then the connection's
    assert _reached() == []
    assert result.is_error
    assert "'rebind.test' resolves to 127.0.0.1 (loopback address)" in result.content


async def test_a_fetch_that_stays_on_its_checked_address_goes_direct_past_a_proxy_of_another_scheme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: int, proxy: str
) -> None:
    """Pinning changes where a direct fetch connects, not whether it works."""
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    _dns(monkeypatch, {"steady.test": ["127.0.0.2"]})
    result = await _fetch(tmp_path, f"http://steady.test:{port}/")
    assert not result.is_error, result.content
    assert '"served_by": "127.0.0.2"' in result.content
    assert _reached() == ["127.0.0.2"]


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
async def test_a_fetch_the_environments_proxy_covers_goes_to_the_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: int, proxy: str, variable: str
) -> None:
    """A request a proxy variable covers is sent to the proxy (which resolves the name
    itself), not connected to directly: an operator's proxy keeps carrying web_fetch."""
    monkeypatch.setenv(variable, proxy)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1,other.test")
    _dns(monkeypatch, {"rebind.test": ["127.0.0.2"]})
    result = await _fetch(tmp_path, f"http://rebind.test:{port}/page")
    assert not result.is_error, result.content
    assert '"served_by": "proxy"' in result.content
    assert _Service.seen == [("proxy", f"http://rebind.test:{port}/page", None)]


def _connector(base_url: str, **extra: Any) -> HttpConnector:
    return HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": base_url,
            "auth": {"type": "bearer", "token": _TOKEN},
            "retries": 0,
            "actions": {"item": {"path": "/item"}, "hop": {"path": "/hop"}},
            **extra,
        }
    )


async def _call(decl: HttpConnector, *actions: str) -> list[ToolResult]:
    services = Services()
    try:
        client = get_client(services, "vendor", decl)
        tools = ToolRegistry([action_tool(client, action) for action in ("item", "hop")])
        return [await tools.call(f"vendor__{action}", {}) for action in actions]
    finally:
        await services.aclose()


@pytest.mark.parametrize("environment", [{}, {"HTTPS_PROXY": "{proxy}"}], ids=["", "https-proxy"])
async def test_a_connector_on_a_public_host_is_refused_when_its_name_later_answers_loopback(
    monkeypatch: pytest.MonkeyPatch, port: int, proxy: str, environment: dict[str, str]
) -> None:
    """The connector's host was public at its first call; a later answer of 127.0.0.1 (the
    vendor's DNS, a rebinding attacker) refuses the call: nothing reaches the machine's own
    service, and the bearer token goes only to the public address."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value.format(proxy=proxy))
    _dns(monkeypatch, {"api.vendor.test": ["127.0.0.2", "127.0.0.1"]})
    first, second = await _call(_connector(f"http://api.vendor.test:{port}/api"), "item", "item")
    assert '"served_by": "127.0.0.2"' in first.content
    assert second.is_error
    assert "the connector's own host changed address" in second.content
    assert "'api.vendor.test' resolves to 127.0.0.1 (loopback address)" in second.content
    assert _Service.seen == [("127.0.0.2", "/api/item", f"Bearer {_TOKEN}")]


async def test_a_connectors_redirect_no_proxy_carries_connects_to_the_address_checked(
    monkeypatch: pytest.MonkeyPatch, port: int, proxy: str
) -> None:
    """A redirect to another host is checked, then connected to at the checked address,
    with only `HTTPS_PROXY` set too: its name answering 127.0.0.1 the second time is
    refused, not followed."""
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    _dns(
        monkeypatch,
        {"api.vendor.test": ["127.0.0.2"], "rebind.test": ["127.0.0.2", "127.0.0.1"]},
    )
    (result,) = await _call(_connector(f"http://api.vendor.test:{port}/api"), "hop")
    assert result.is_error
    assert "'rebind.test' resolves to 127.0.0.1 (loopback address)" in result.content
    assert _reached() == ["127.0.0.2"]


@pytest.mark.parametrize("host", ["localhost", "api.office.test"])
async def test_a_connector_declared_on_an_internal_host_keeps_working(
    monkeypatch: pytest.MonkeyPatch, port: int, host: str
) -> None:
    """A developer's API on localhost, or a name in the office network, is internal from
    its first call: every call reaches it, with its credentials."""
    _dns(monkeypatch, {host: ["127.0.0.1"]})
    results = await _call(_connector(f"http://{host}:{port}/api"), "item", "item")
    assert [result.is_error for result in results] == [False, False]
    assert all('"served_by": "127.0.0.1"' in result.content for result in results)
    assert _Service.seen == [("127.0.0.1", "/api/item", f"Bearer {_TOKEN}")] * 2
