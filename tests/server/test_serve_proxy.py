"""`fim serve` behind a reverse proxy: `server.root_path` (`--root-path`) is the prefix the
proxy serves fim under, and the URLs fim hands out carry it (the 202 `Location` and `url`
of a background run); requests work whether the proxy strips the prefix or passes it on,
and the development page asks for its files and the API relative to itself.
`server.trusted_proxies` (`--forwarded-allow-ips`) names the proxies whose
`X-Forwarded-For` is believed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.errors import ConfigError
from fim.server.app import create_app
from fim.server.proxy import behind
from fim.testing.cluster import until
from fim.testing.server import ServerThread, fim_server

STATIC = Path(__file__).resolve().parents[2] / "fim" / "server" / "static"


def project(root: Path, server_yaml: str = "") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(f"name: proxied\n{server_yaml}")
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    return root


def test_a_background_run_is_located_under_the_prefix_either_way_the_proxy_forwards(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p")
    app = behind(create_app(SnapshotHolder(compile_project(root))), "/fim")
    with ServerThread(app) as srv:
        for sent in ("/fim/v1/agents/echo/runs", "/v1/agents/echo/runs"):  # kept, stripped
            accepted = httpx.post(srv.url + sent, json={"input": "hi", "background": True})
            assert accepted.status_code == 202, accepted.text
            location = accepted.headers["Location"]
            assert re.fullmatch(r"/fim/v1/runs/\w+", location)
            assert accepted.json()["url"] == location

            def finished(loc: str = location) -> dict[str, Any] | None:
                record: dict[str, Any] = httpx.get(srv.url + loc).json()
                return record if record["status"] == "ok" else None

            record = until(finished)
            assert record["data"]["output"] == "pong"
            stripped = location.removeprefix("/fim")
            assert httpx.get(srv.url + stripped).json()["status"] == "ok"
        assert httpx.get(srv.url + "/fim/healthz").status_code == 200
        assert httpx.get(srv.url + "/fim/static/app.js").status_code == 200
        assert httpx.get(srv.url + "/fimx/healthz").status_code == 404  # not the prefix


def test_without_a_prefix_locations_are_as_before(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        accepted = httpx.post(
            srv.url + "/v1/agents/echo/runs", json={"input": "hi", "background": True}
        )
        assert re.fullmatch(r"/v1/runs/\w+", accepted.headers["Location"])


def test_the_page_asks_for_its_files_and_the_api_relative_to_itself() -> None:
    for page in ("index.html", "docs.html"):
        text = (STATIC / page).read_text()
        assert not re.search(r'(?:href|src)="/', text), f"{page} has a root-relative link"
    assert 'fetch("/' not in (STATIC / "docs.js").read_text()
    app_js = (STATIC / "app.js").read_text()
    assert 'fetch(path.replace(/^\\//, ""), init)' in app_js  # every API call goes through it
    assert len(re.findall(r"\bfetch\(", app_js)) == 1


def access_client(log: Path) -> str:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return next(line["client"] for line in lines if line.get("path") == "/v1/status")


@pytest.mark.parametrize(
    ("server_yaml", "flags", "client"),
    [
        ("", (), "203.0.113.9"),  # loopback is trusted by default (a sidecar proxy)
        ("server: {trusted_proxies: [10.0.0.0/8]}\n", (), "127.0.0.1"),  # not this peer
        (
            "server: {trusted_proxies: [10.0.0.0/8]}\n",
            ("--forwarded-allow-ips", "*"),
            "203.0.113.9",
        ),
    ],
)
def test_forwarded_for_is_believed_only_from_trusted_proxies(
    tmp_path: Path, server_yaml: str, flags: tuple[str, ...], client: str
) -> None:
    root = project(tmp_path / "p", server_yaml)
    extra = ("--log-format", "json", "--log-level", "info", *flags)
    with fim_server(root, *extra) as (url, _proc):
        httpx.get(f"{url}/v1/status", headers={"X-Forwarded-For": "203.0.113.9"})
        log = next(root.glob("serve-*.log"))
        assert until(lambda: access_client(log) if "/v1/status" in log.read_text() else None) == (
            client
        )


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("{trusted_proxies: [10.0.0.300]}", "trusted_proxies"),
        ("{root_path: fim}", "root_path"),
    ],
)
def test_a_wrong_proxy_setting_is_refused_naming_it(
    tmp_path: Path, setting: str, field: str
) -> None:
    root = project(tmp_path / "p", f"server: {setting}\n")
    with pytest.raises(ConfigError) as caught:
        compile_project(root)
    assert field in str(caught.value) and "fim.yaml:2:" in str(caught.value)


def test_root_path_is_written_one_way(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "server: {root_path: /team/fim/}\n")
    assert compile_project(root).project.server.root_path == "/team/fim"
