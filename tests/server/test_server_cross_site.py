"""A web page the developer visits must not use their `fim serve` (`fim.server.cross_site`).

Without API keys nothing a browser must add protects the server, so: a POST must say its
body is JSON (no form or simple `fetch` can); a request a page sent must come from the
server's own origin or `server.cors_origins`; one another site's page made without an
Origin (`Sec-Fetch-Site`) only opens a page; and the Host must be a loopback name or one of
`server.allowed_hosts` (a site re-pointed at the server is not), `server.allow_open` or not.
A keyed server is left to its keys, but still takes only JSON. Every refused request starts
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.server.cross_site import loopback
from fim.testing.server import ServerThread

EVIL = "https://evil.example"
RUN = {"input": "hi"}


def write_project(root: Path, server: str = "") -> Path:
    files = {
        "fim.yaml": f'name: cs\nstate: "sqlite:///.fim/state.db"\n{server}',
        "agents/a.yaml": "model: scripted:a.script.yaml\n",
        "a.script.yaml": '- text: "hi"\n',
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def serve(root: Path) -> ServerThread:
    return ServerThread(create_app(SnapshotHolder(compile_project(root))))


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[str]:
    with serve(write_project(tmp_path)) as srv:
        yield srv.url


def runs(url: str, **headers: str) -> int:
    return len(httpx.get(f"{url}/v1/runs", headers=headers).json()["runs"])


def test_a_pages_simple_post_to_a_server_without_keys_starts_nothing(open_server: str):
    url = open_server
    as_form = httpx.post(
        f"{url}/v1/agents/a/runs",
        content=b'{"input": "hi", "x": "="}',  # what an enctype=text/plain form sends
        headers={"Content-Type": "text/plain", "Origin": EVIL},
    )
    assert as_form.status_code == 415 and "Content-Type: application/json" in as_form.text
    assert as_form.json()["error"]["code"] == "unsupported_media_type"
    no_type = httpx.post(f"{url}/v1/agents/a/runs", content=b'{"input": "hi"}')
    assert no_type.status_code == 415
    from_elsewhere = httpx.post(f"{url}/v1/agents/a/runs", json=RUN, headers={"Origin": EVIL})
    assert from_elsewhere.status_code == 403
    assert "server.cors_origins" in from_elsewhere.json()["error"]["hint"]
    for origin in ("null", "http://127.0.0.1:1", url.replace("http://", "https://x.")):
        headers = {"Origin": origin}
        assert httpx.post(f"{url}/v1/agents/a/runs", json=RUN, headers=headers).status_code == 403
    # the other ways in: a workflow, an approval, the OpenAI surface, MCP, A2A
    for path in ("/v1/chat/completions", "/v1/approvals/x", "/mcp", "/a2a/a"):
        assert httpx.post(f"{url}{path}", json={}, headers={"Origin": EVIL}).status_code == 403
    assert runs(url) == 0


def test_the_check_reads_the_header_a_route_reads(open_server: str):
    """A header sent twice: the check read the last, Starlette's routes the first. A client
    that is no browser can send both; the check now judges the one the route uses."""
    url = open_server
    two_origins = [("Origin", EVIL), ("Origin", url), ("Content-Type", "application/json")]
    sent = httpx.post(f"{url}/v1/agents/a/runs", content=b'{"input": "hi"}', headers=two_origins)
    assert sent.status_code == 403
    two_types = [("Content-Type", "text/plain"), ("Content-Type", "application/json")]
    sent = httpx.post(f"{url}/v1/agents/a/runs", content=b'{"input": "hi"}', headers=two_types)
    assert sent.status_code == 415
    assert runs(url) == 0


def test_a_name_re_pointed_at_loopback_is_refused(open_server: str):
    rebound = httpx.get(f"{open_server}/v1/status", headers={"Host": "evil.example:8000"})
    assert rebound.status_code == 403 and "re-pointing" in rebound.json()["error"]["message"]
    port = open_server.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "app.localhost", "[::1]:80"):
        assert httpx.get(f"{open_server}/v1/status", headers={"Host": host}).status_code == 200


def test_the_servers_own_page_and_plain_clients_go_on(open_server: str):
    url = open_server
    same_origin = httpx.post(f"{url}/v1/agents/a/runs", json=RUN, headers={"Origin": url})
    assert same_origin.status_code == 200, same_origin.text
    plain = httpx.post(f"{url}/v1/agents/a/runs", json=RUN)  # curl, SDKs: no Origin
    assert plain.status_code == 200
    charset = {"Content-Type": "application/json; charset=utf-8"}
    assert httpx.post(f"{url}/v1/agents/a/runs", content=b'{"input": "x"}', headers=charset)
    assert runs(url) == 3


def test_listed_origins_and_allowed_hosts_are_let_in_and_keys_decide_on_keyed_servers(
    tmp_path: Path,
):
    root = write_project(tmp_path / "cors", "server: {cors_origins: ['https://app.example']}\n")
    with serve(root) as srv:
        listed = {"Origin": "https://app.example"}
        assert httpx.post(f"{srv.url}/v1/agents/a/runs", json=RUN, headers=listed).is_success
    root = write_project(
        tmp_path / "proxy",
        "server: {allow_open: true, allowed_hosts: [fim.internal.example]}\n",
    )
    with serve(root) as srv:
        proxied = {"Host": "fim.internal.example"}
        assert httpx.get(f"{srv.url}/v1/status", headers=proxied).status_code == 200
        with_port = {"Host": "FIM.internal.example:8443"}
        assert httpx.get(f"{srv.url}/v1/status", headers=with_port).status_code == 200
        # a proxy's cookie is a browser's: another site's page is still refused
        evil = {"Host": "fim.internal.example", "Origin": EVIL}
        assert httpx.post(f"{srv.url}/v1/agents/a/runs", json=RUN, headers=evil).status_code == 403
    root = write_project(tmp_path / "keyed", "server: {api_keys: [k3y]}\n")
    with serve(root) as srv:
        keyed = {"Authorization": "Bearer k3y", "Origin": EVIL, "Host": "fim.example"}
        assert httpx.post(f"{srv.url}/v1/agents/a/runs", json=RUN, headers=keyed).is_success
        as_text = {"Authorization": "Bearer k3y", "Content-Type": "text/plain"}
        refused = httpx.post(f"{srv.url}/v1/agents/a/runs", content=b"{}", headers=as_text)
        assert refused.status_code == 415


def test_every_origin_when_the_owner_lists_star_and_validate_warns(tmp_path: Path):
    from typer.testing import CliRunner

    from fim.cli import app

    root = write_project(tmp_path, "server: {cors_origins: ['*']}\n")
    with serve(root) as srv:
        anyone = {"Origin": EVIL}
        assert httpx.post(f"{srv.url}/v1/agents/a/runs", json=RUN, headers=anyone).is_success
    result = CliRunner().invoke(app, ["validate", "--project", str(root)])
    assert result.exit_code == 0
    assert "fim.yaml:1:1: warning: server.cors_origins lists '*'" in result.output


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1:8000", True),
        ("127.9.9.9", True),
        ("localhost", True),
        ("LOCALHOST.:8000", True),
        ("dev.localhost:3000", True),
        ("[::1]:8000", True),
        ("::1", True),
        ("", False),
        ("evil.example", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.evil.example:80", False),
        ("10.0.0.1:8000", False),
        ("[::ffff:10.0.0.1]", False),
    ],
)
def test_loopback_names(host: str, expected: bool):
    assert loopback(host) is expected
