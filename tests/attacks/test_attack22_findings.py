"""Attack round 22 (where fim reaches the network): what must hold.

Each test states the safe behaviour of a finding of `/work/notes/attack-22.md` (fixed:
pinning whatever the proxy variables, a connector's own host judged once). All are
offline: "public" is 127.0.0.2 (the guard's ruling patched for it), "internal" is a
service on 127.0.0.1, and DNS answers come from a patched `getaddrinfo`; no connection
ever goes to an address off this machine.
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

_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


class _Answer(BaseHTTPRequestHandler):
    """Answers with the address it was reached on, and records the Authorization sent."""

    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        address = str(self.connection.getsockname()[0])
        _Answer.seen.append((address, self.headers.get("Authorization")))
        body = f'{{"served_by": "{address}"}}'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def two_servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """An internal service on 127.0.0.1 and a "public" one on 127.0.0.2, on one port."""
    internal = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    port = internal.server_address[1]
    public = ThreadingHTTPServer(("127.0.0.2", port), _Answer)
    for server in (internal, public):
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
    ruling = web_fetch._why_blocked
    monkeypatch.setattr(
        web_fetch, "_why_blocked", lambda ip: None if str(ip) == "127.0.0.2" else ruling(ip)
    )
    _Answer.seen.clear()
    yield port
    for server in (internal, public):
        server.shutdown()
        server.server_close()


def _rebinding(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """`name` answers 127.0.0.2 ("public") first, 127.0.0.1 on every later lookup."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    answers: list[str] = []

    async def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (name, name.encode()):  # anyio asks in IDNA bytes
            return await real(host, port, *args, **kwargs)
        answers.append(answer := "127.0.0.2" if not answers else "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(loop, "getaddrinfo", rebinding)
    return answers


@pytest.mark.parametrize(
    "environment",
    [
        {"HTTPS_PROXY": "http://127.0.0.1:9"},
        {"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "rebind.test"},
    ],
    ids=["https-proxy-only", "no-proxy-match"],
)
async def test_a_fetch_the_environments_proxy_does_not_carry_connects_to_the_vetted_address(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    two_servers: int,
    environment: dict[str, str],
) -> None:
    """A proxy in fim's environment for another scheme, or a NO_PROXY entry, leaves this
    fetch direct: it must still connect to the address the guard checked, never to a
    second answer of the name (DNS rebinding to an internal service)."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    answers = _rebinding(monkeypatch, "rebind.test")
    ctx = RunContext(
        snapshot=Snapshot(root=tmp_path, project=Project(web_fetch=WebFetchSettings())),
        agent=AgentDecl(name="tester", tools=["web_fetch"]),
        services=Services(providers=CAPABILITIES, root=tmp_path),
    )
    tools = ToolRegistry(builtin.provide(ctx).tools)
    result = await tools.call("web_fetch", {"url": f"http://rebind.test:{two_servers}/"})
    assert answers[:1] == ["127.0.0.2"]
    assert "127.0.0.1" not in [address for address, _ in _Answer.seen]
    assert '"served_by": "127.0.0.1"' not in result.content


async def test_a_connector_on_a_public_host_never_connects_to_an_internal_address(
    monkeypatch: pytest.MonkeyPatch, two_servers: int
) -> None:
    """`base_url`'s host answered a public address when the connector was first used; a
    later answer of 127.0.0.1 (the vendor's DNS, a rebinding attacker) must not send the
    call, and its bearer token, to the machine's own services. A redirect from that host
    to 127.0.0.1 is refused today; its DNS must not do what the redirect may not."""
    answers = _rebinding(monkeypatch, "api.vendor.test")
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": f"http://api.vendor.test:{two_servers}/api",
            "auth": {"type": "bearer", "token": "tok-0123456789abcdef"},
            "retries": 0,
            "actions": {"item": {"path": "/item"}},
        }
    )
    services = Services()
    try:
        tools = ToolRegistry([action_tool(get_client(services, "vendor", decl), "item")])
        first = await tools.call("vendor__item", {})
        assert '"served_by": "127.0.0.2"' in first.content
        second = await tools.call("vendor__item", {})  # a new connection: the server closed
    finally:
        await services.aclose()
    assert answers == ["127.0.0.2", "127.0.0.1"]
    assert [address for address, _ in _Answer.seen] == ["127.0.0.2"]
    assert second.is_error and '"served_by": "127.0.0.1"' not in second.content
