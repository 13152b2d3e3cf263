"""A `/mcp` request whose JSON-RPC `id` is no string or integer is answered `-32600`
(attack-63 F4): the MCP SDK took `"id": 1.5`, `{}`, `[1]` or `NaN` for a notification and
answered `202` with no body inside a session, so nothing ran, nothing was logged, and the
client waited for an answer that never came. Requests with proper ids, and notifications,
are served as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.testing.server import ServerThread

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """The URL of `/mcp` and the headers of an initialized session on it."""
    root = tmp_path_factory.mktemp("mcpids")
    (root / "agents").mkdir()
    (root / "fim.yaml").write_text('name: ids\nstate: "sqlite:///.fim/state.db"\n')
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text("description: echo\nmodel: scripted:pong.yaml\n")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as server:
        url = f"{server.url}/mcp"
        hello = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        opened = httpx.post(url, json=hello, headers=HEADERS, timeout=30)
        assert opened.status_code == 200, opened.text
        headers = {**HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        headers["Mcp-Protocol-Version"] = "2025-06-18"
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert httpx.post(url, json=done, headers=headers, timeout=30).status_code == 202
        yield url, headers


def post(session: tuple[str, dict[str, str]], body: str) -> httpx.Response:
    url, headers = session
    return httpx.post(url, content=body, headers=headers, timeout=30)


@pytest.mark.parametrize("bad", ["1.5", '{"a": 1}', "[1]", "NaN", "true"])
def test_an_id_of_another_kind_is_an_invalid_request(session: Any, bad: str) -> None:
    answer = post(session, f'{{"jsonrpc": "2.0", "id": {bad}, "method": "tools/list"}}')
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == -32600 and "an id is a string or an integer" in error["message"]


def test_proper_ids_and_notifications_are_served_as_before(session: Any) -> None:
    listed = post(session, '{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}')
    assert listed.status_code == 200 and '"echo"' in listed.text
    named = post(session, '{"jsonrpc": "2.0", "id": "x", "method": "tools/list"}')
    assert named.status_code == 200 and '"echo"' in named.text
    note = '{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}'
    assert post(session, note).status_code == 202
