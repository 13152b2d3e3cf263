"""A connector call is the model's reach into a real service, and the service's answer is
hostile too.

A path parameter must reach the resource hooks were shown: `quote(value, safe="")` turns `/`
into `%2F`, but `..` and `.` are unreserved characters, they passed through, and the HTTP
client resolved the dot segments. `DELETE /projects/{project}/files/{file}` with
`{"project": "sandbox", "file": ".."}` (a guard that only lets the model touch project
`sandbox` allows it) deleted `/projects/sandbox`.

The answer is masked before it is cut (a model padding what the service echoes slid the cut
onto the key and read all but its last character); redirects are followed by hand, the
credentials only to the connector's own origin and no hop to an internal address from a
public one (httpx sent `X-API-Key` to any host a redirect named); a compressed body is
inflated no further than the byte cap (`Content-Encoding: gzip, gzip`: 600 bytes, 256 MB);
and a document nested past the parser's limit is an error, not a RecursionError.
"""

from __future__ import annotations

import gzip
import json
import threading
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from fim.config.schema import HttpConnector
from fim.connectors import http_fetch as http_mod
from fim.connectors.http import get_client
from fim.connectors.http_tool import action_tool
from fim.run.services import Services
from fim.tools.builtin import web_fetch
from fim.tools.registry import ToolRegistry
from fim.types import ToolResult
from tests.http_stubs import Quiet, answer, serving


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    """A loopback API that answers every request and records its method and path."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    svc = Services()
    yield svc
    await svc.aclose()


async def test_a_path_parameter_cannot_move_the_call_to_another_resource(
    recorder: tuple[str, list[str]], services: Services
) -> None:
    url, seen = recorder
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": url,
            "actions": {
                "delete_file": {
                    "method": "DELETE",
                    "path": "/projects/{project}/files/{file}",
                    "access": "write",
                }
            },
        }
    )
    tools = ToolRegistry([action_tool(get_client(services, "store", decl), "delete_file")])
    for file in ("..", ".", ""):
        result = await tools.call("store__delete_file", {"project": "sandbox", "file": file})
        assert result.is_error and "would change which URL is called" in result.content
    assert seen == []
    done = await tools.call("store__delete_file", {"project": "sandbox", "file": "..a"})
    assert not done.is_error and seen == ["DELETE /api/projects/sandbox/files/..a"]


# ------------------------------------------------------------------ a hostile service

KEY = "sk-live-9f8e7d6c5b4a3210"


def _pieces(text: str, secret: str = KEY) -> list[str]:
    """Every part of `secret` of 4 characters or more that `text` shows."""
    return [
        secret[i:j]
        for i in range(len(secret))
        for j in range(i + 4, len(secret) + 1)
        if secret[i:j] in text
    ]


def _bomb(mib: int) -> bytes:
    """`mib` MiB of zeros, gzipped (about a thousandth of that on the wire)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * 2**20
    return b"".join([*(squeeze.compress(block) for _ in range(mib)), squeeze.flush()])


BOMB = _bomb(64)


class _Hostile(Quiet):
    """Echoes what it was sent, redirects where it is told, and answers with bombs."""

    seen: list[tuple[str, str, dict[str, str]]]

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.seen.append((self.server.server_address[0], self.path, headers))
        status, extra, body = 200, {"Content-Type": "application/json"}, b""
        if url.path == "/echo":  # the query first, then the key: padding moves the key
            echoed = {"pad": query.get("pad", ""), "key": headers.get("x-api-key")}
            status, body = int(query.get("status", "200")), json.dumps(echoed).encode()
        elif url.path == "/text":
            extra["Content-Type"] = "text/plain"
            body = f"{query.get('pad', '')}key={headers.get('x-api-key')};".encode()
        elif url.path == "/go":
            status, extra = int(query.get("code", "302")), {"Location": query["to"]}
        elif url.path == "/loop":
            status, extra = 302, {"Location": "/loop"}
        elif url.path == "/double":
            extra["Content-Encoding"] = "gzip, gzip"
            body = gzip.compress(gzip.compress(b'{"ok": true}'))
        elif url.path == "/bomb":
            extra = {"Content-Type": "text/plain", "Content-Encoding": "gzip"}
            body = BOMB
        elif url.path == "/brotli":
            extra["Content-Encoding"] = "br"
            body = b"\x1b\x00\x00"
        elif url.path == "/deep":
            body = b"[" * 100_000 + b"]" * 100_000
        else:
            body = json.dumps({"served_by": self.server.server_address[0]}).encode()
        answer(self, body, status, extra)


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[str, str, list[tuple[str, str, dict[str, str]]]]]:
    """The service on 127.0.0.1 and another origin on 127.0.0.2 (another host, as far as
    URLs go), recording (address, path, headers) of every request either got."""
    seen: list[tuple[str, str, dict[str, str]]] = []
    handler = type("Handler", (_Hostile,), {"seen": seen})
    servers = [ThreadingHTTPServer((host, 0), handler) for host in ("127.0.0.1", "127.0.0.2")]
    for server in servers:
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
    api, other = (f"http://{s.server_address[0]}:{s.server_address[1]}" for s in servers)
    yield api, other, seen
    for server in servers:
        server.shutdown()
        server.server_close()


def _connector(base_url: str, **fields: Any) -> HttpConnector:
    actions = {
        name: {"path": f"/{name}"}
        for name in ("echo", "text", "go", "loop", "double", "bomb", "brotli", "deep")
    }
    return HttpConnector.model_validate(
        {"kind": "http", "base_url": base_url, "actions": actions, "retries": 0, **fields}
    )


async def _call(services: Services, decl: HttpConnector, action: str, **args: Any) -> ToolResult:
    tools = ToolRegistry([action_tool(get_client(services, "svc", decl), action)])
    return await tools.call(f"svc__{action}", args)


@pytest.mark.parametrize(
    ("action", "status", "opening"),
    [("echo", 200, '{"pad": "'), ("text", 200, ""), ("echo", 404, '[HTTP 404] {"pad": "')],
)
async def test_a_cut_never_shows_part_of_a_key_the_service_echoes(
    hostile: Any, services: Services, action: str, status: int, opening: str
) -> None:
    """The model pads the value the service echoes before the key, so the cut at
    `max_response_chars` (1,000 characters for an error's excerpt) slides along the key:
    wherever it lands, no 4 characters of the key are shown."""
    api, _, _ = hostile
    limit = 1000 if status >= 400 else 300
    decl = _connector(api, auth={"type": "api_key", "key": KEY}, max_response_chars=limit)
    before_key = len('", "key": "') if action == "echo" else len("key=")
    excerpt_start = len(opening) - len("[HTTP 404] ") if status >= 400 else len(opening)
    for inside in range(len(KEY) + 2):  # the cut lands `inside` characters into the key
        pad = "a" * (limit - excerpt_start - before_key - inside)
        result = await _call(services, decl, action, pad=pad, status=status)
        assert "more characters cut" in result.content or "***" in result.content
        assert _pieces(result.content) == [], (inside, result.content[-80:])


async def test_a_body_the_byte_cap_cut_does_not_end_in_part_of_a_key(
    hostile: Any, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second layer: a body read only up to MAX_BODY_BYTES ends in a cut fim did not
    choose, which masking the whole text cannot help; the piece there that begins the key
    is masked too."""
    api, _, _ = hostile
    monkeypatch.setattr(http_mod, "MAX_BODY_BYTES", 500)
    decl = _connector(api, auth={"type": "api_key", "key": KEY})
    for inside in range(4, len(KEY)):
        pad = "a" * (500 - len("key=") - inside)
        result = await _call(services, decl, "text", pad=pad)
        assert "response larger than 500 bytes" in result.content
        assert _pieces(result.content) == [], (inside, result.content[-120:])


async def test_credentials_go_only_to_the_connectors_own_origin(
    hostile: Any, services: Services
) -> None:
    """An API that redirects to another origin (a presigned download URL) is followed, the
    way a browser does: the hop carries none of the connector's credentials, whatever
    their shape (httpx strips only Authorization: an `X-API-Key` or a `PRIVATE-TOKEN`
    header went to whatever host the redirect named)."""
    api, other, seen = hostile
    cases: list[tuple[dict[str, Any], str]] = [
        ({"auth": {"type": "api_key", "key": KEY}}, "x-api-key"),
        ({"auth": {"type": "api_key", "key": KEY, "name": "k", "location": "query"}}, "url"),
        ({"auth": {"type": "bearer", "token": KEY}}, "authorization"),
        ({"auth": {"type": "basic", "username": "ann", "password": KEY}}, "authorization"),
        ({"headers": {"PRIVATE-TOKEN": KEY, "X-Tenant": "acme"}}, "private-token"),
    ]
    for fields, carrier in cases:
        seen.clear()
        result = await _call(services, _connector(api, **fields), "go", to=f"{other}/dl?sig=a")
        assert json.loads(result.content) == {"served_by": "127.0.0.2"}, fields
        (_, sent, first), (where, path, hop) = seen
        assert (KEY in sent) if carrier == "url" else (carrier in first), fields
        assert (where, path) == ("127.0.0.2", "/dl?sig=a")
        assert not {"x-api-key", "authorization", "private-token", "x-tenant"} & set(hop)
        assert all(KEY not in value for value in hop.values()), (fields, hop)


async def test_a_redirect_within_the_origin_keeps_the_credentials(
    hostile: Any, services: Services
) -> None:
    api, _, seen = hostile
    seen.clear()
    decl = _connector(api, auth={"type": "api_key", "key": KEY}, headers={"X-Tenant": "acme"})
    result = await _call(services, decl, "go", to="/echo?pad=x")
    assert json.loads(result.content) == {"pad": "x", "key": "***"}
    (_, _, hop) = seen[-1]
    assert (hop["x-api-key"], hop["x-tenant"]) == (KEY, "acme")


async def test_a_connector_on_a_public_host_is_not_redirected_to_an_internal_one(
    hostile: Any, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The redirect target passes web_fetch's guard: a connector whose own host is public
    (127.0.0.1 stands in for one here) reaches no loopback, private or link-local address
    by a redirect; a connector on an internal host may (the previous test's)."""
    api, other, seen = hostile
    ruling = web_fetch._why_blocked
    monkeypatch.setattr(
        web_fetch, "_why_blocked", lambda ip: None if str(ip) == "127.0.0.1" else ruling(ip)
    )
    for target in (f"{other}/collect", "http://10.1.2.3/admin", "http://169.254.169.254/"):
        seen.clear()
        result = await _call(services, _connector(api), "go", to=target)
        assert result.is_error, target
        assert "redirected to another host" in result.content
        assert "address); fetching internal addresses is blocked" in result.content
        assert [where for where, _, _ in seen] == ["127.0.0.1"]
    scheme = await _call(services, _connector(api), "go", to="file:///etc/passwd")
    assert scheme.is_error and "'file' URL" in scheme.content


async def test_a_redirect_loop_is_cut_off(hostile: Any, services: Services) -> None:
    api, _, _ = hostile
    result = await _call(services, _connector(api), "loop")
    assert result.is_error and "redirected more than 5 times" in result.content


async def test_stacked_or_unknown_content_codings_are_refused_unread(
    hostile: Any, services: Services
) -> None:
    api, _, _ = hostile
    double = await _call(services, _connector(api), "double")
    assert double.is_error
    assert "compressed 2 times over (Content-Encoding: gzip, gzip)" in double.content
    brotli = await _call(services, _connector(api), "brotli")
    assert brotli.is_error and "compressed with 'br', which fim does not decode" in brotli.content


async def test_a_compressed_body_is_inflated_no_further_than_the_cap(
    hostile: Any, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 MiB of zeros in 64 KB of gzip: httpx inflated each network chunk whole before
    the cap was checked; now no step makes more than the cap allows."""
    api, _, _ = hostile
    monkeypatch.setattr(http_mod, "MAX_BODY_BYTES", 2**20)
    decl = _connector(api, max_response_chars=100)
    # a first call makes what every call shares (the client, its TLS context, imports):
    # the peak below is the bomb's alone, whichever tests ran before in this process
    await _call(services, decl, "echo")
    tracemalloc.start()
    try:
        result = await _call(services, decl, "bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.is_error
    assert result.content.endswith("more characters cut; ask for less data]")
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB"


async def test_a_document_nested_past_the_parsers_limit_is_an_error(
    hostile: Any, services: Services
) -> None:
    api, _, _ = hostile
    result = await _call(services, _connector(api), "deep")
    assert result.is_error
    assert "the response is JSON nested too deeply to read" in result.content


async def test_a_hop_connects_to_the_address_the_guard_vetted(
    hostile: Any, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding on a redirect: `rebind.test` answers a "public" address when the hop
    is checked, then a loopback one. The connection asks the guard again (the pinned
    transport of web_fetch), so it is refused rather than made to the second answer."""
    import asyncio
    import socket

    api, _, seen = hostile
    ruling = web_fetch._why_blocked
    public = {"127.0.0.1", "127.0.0.2"}
    monkeypatch.setattr(
        web_fetch, "_why_blocked", lambda ip: None if str(ip) in public else ruling(ip)
    )
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    answers: list[str] = []

    async def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("rebind.test", b"rebind.test"):
            return await real(host, port, *args, **kwargs)
        answers.append(answer := "127.0.0.2" if not answers else "127.0.0.3")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(loop, "getaddrinfo", rebinding)
    seen.clear()
    result = await _call(services, _connector(api), "go", to="http://rebind.test:9/x")
    assert result.is_error
    assert "resolves to 127.0.0.3 (loopback address)" in result.content
    assert answers == ["127.0.0.2", "127.0.0.3"]


async def test_a_cookie_one_run_got_never_goes_out_with_another_runs_call(
    services: Services,
) -> None:
    """One client serves every run and key of a declaration: a cookie the service set for
    one run (its session, a CSRF token) would go out with the next run's calls, another
    tenant's included. The client keeps none; credentials are declared."""
    sent: list[str] = []

    class Handler(Quiet):
        def do_GET(self) -> None:
            sent.append(self.headers.get("Cookie", ""))
            login = self.path.startswith("/api/login")
            cookie = {"Set-Cookie": "session=tenant-a-session; Path=/"} if login else {}
            answer(self, b"{}", headers={"Content-Type": "application/json", **cookie})

    with serving(Handler) as server:
        decl = HttpConnector.model_validate(
            {
                "kind": "http",
                "base_url": f"http://127.0.0.1:{server.server_address[1]}/api",
                "actions": {"login": {"path": "/login"}, "whoami": {"path": "/whoami"}},
            }
        )
        client = get_client(services, "svc", decl)
        tools = ToolRegistry([action_tool(client, a) for a in ("login", "whoami")])
        assert not (await tools.call("svc__login", {})).is_error  # run A
        assert not (await tools.call("svc__whoami", {})).is_error  # run B, same client
    assert sent == ["", ""]
