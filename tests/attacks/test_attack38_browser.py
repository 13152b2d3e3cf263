"""Attack-38: a real browser against `fim serve` without keys (/work/notes/attack-38.md).

- #1 `server.allow_open` (a proxy in front authenticates) no longer lifts the Host rule: a
  site that re-points its name at the server (or at the proxy, which forwards that name)
  got the whole API from the victim's browser. The names the proxy forwards are listed in
  `server.allowed_hosts`; `fim validate` warns about `allow_open` without them, and about
  `allowed_hosts: ['*']`.
- #3 A request without an `Origin` that the browser says another site's page made
  (`Sec-Fetch-Site: cross-site`: an `<img>`, a `no-cors` GET) is refused unless it opens a
  page: `GET /v1/agents/{name}/prompt` started the project's MCP servers for any site.

The headers are those Chromium sends (checked in the attack with Chromium 156); the server
is real.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.server.cross_site import _listed
from tests.server.test_server_cross_site import RUN, runs, serve, write_project

REBOUND = {"Host": "evil.test:8039", "Origin": "http://evil.test:8039"}
IMG = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}


def test_allow_open_answers_the_listed_names_only_not_a_rebound_one(tmp_path: Path) -> None:
    root = write_project(
        tmp_path, "server: {allow_open: true, allowed_hosts: [fim.corp.example]}\n"
    )
    with serve(root) as srv:
        started = httpx.post(f"{srv.url}/v1/agents/a/runs", json=RUN, headers=REBOUND)
        assert started.status_code == 403 and "server.allowed_hosts" in started.text
        read = httpx.get(f"{srv.url}/v1/runs", headers={"Host": "evil.test:8039"})
        assert read.status_code == 403
        forwarded = {"Host": "fim.corp.example", "Origin": "http://fim.corp.example"}
        assert httpx.post(f"{srv.url}/v1/agents/a/runs", json=RUN, headers=forwarded).is_success
        assert runs(srv.url) == 1


def test_allow_open_without_allowed_hosts_serves_loopback_names_and_validate_says_so(
    tmp_path: Path,
) -> None:
    root = write_project(tmp_path, "server:\n  allow_open: true\n")
    with serve(root) as srv:
        assert httpx.get(f"{srv.url}/v1/status", headers={"Host": "fim.corp"}).status_code == 403
        assert httpx.get(f"{srv.url}/v1/status").status_code == 200
    result = CliRunner().invoke(app, ["validate", "--project", str(root)])
    assert result.exit_code == 0, result.output
    assert "fim.yaml:4:3: warning: server.allow_open without server.allowed_hosts" in result.output


def test_allowed_hosts_star_is_every_name_and_validate_warns(tmp_path: Path) -> None:
    root = write_project(tmp_path, "server:\n  allowed_hosts: ['*']\n")
    with serve(root) as srv:
        assert httpx.get(f"{srv.url}/v1/status", headers={"Host": "evil.test"}).is_success
    result = CliRunner().invoke(app, ["validate", "--project", str(root)])
    assert "warning: server.allowed_hosts lists '*'" in result.output


@pytest.mark.parametrize(
    "fetch",
    [
        IMG,
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"},
        {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "empty"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "embed"},
    ],
)
def test_another_sites_page_gets_no_answer_without_an_origin(
    tmp_path: Path, fetch: dict[str, str]
) -> None:
    with serve(write_project(tmp_path)) as srv:
        refused = httpx.get(f"{srv.url}/v1/agents/a/prompt", headers=fetch)
        assert refused.status_code == 403 and "another site's web page" in refused.text


def test_a_typed_address_and_plain_clients_still_open(tmp_path: Path) -> None:
    """A link another site's page follows to an API route is refused since attack-42 F2
    (tests/server/test_cross_site_navigation.py); the address typed, and curl, are not."""
    typed = {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}
    with serve(write_project(tmp_path)) as srv:
        for headers in (typed, {}):
            assert httpx.get(f"{srv.url}/v1/runs", headers=headers).status_code == 200
        own_page = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
        assert httpx.get(f"{srv.url}/v1/runs", headers=own_page).status_code == 200


def test_a_keyed_server_is_left_to_its_keys(tmp_path: Path) -> None:
    with serve(write_project(tmp_path, "server: {api_keys: [k3y]}\n")) as srv:
        keyed = {"Authorization": "Bearer k3y", **IMG}
        assert httpx.get(f"{srv.url}/v1/runs", headers=keyed).status_code == 200


@pytest.mark.parametrize(
    ("host", "allowed", "expected"),
    [
        ("fim.corp.example", ["fim.corp.example"], True),
        ("FIM.corp.example.:8443", ["fim.corp.example"], True),
        ("fim.corp.example:8443", ["fim.corp.example:8443"], True),
        ("fim.corp.example:9000", ["fim.corp.example:8443"], False),
        ("[2001:db8::1]:8000", ["2001:db8::1"], True),
        ("[2001:db8::1]", ["[2001:db8::1]"], True),
        ("evil.example", ["fim.corp.example", ""], False),
        ("fim.corp.example.evil.example", ["fim.corp.example"], False),
    ],
)
def test_allowed_host_forms(host: str, allowed: list[str], expected: bool) -> None:
    """Names as proxies and browsers send them (attack-39 #7: an IPv6 address with a port,
    or a name with its trailing dot, never matched)."""
    assert _listed(host, tuple(allowed)) is expected
