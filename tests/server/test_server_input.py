"""Hostile HTTP input against a real uvicorn server: chunked bodies past the size limit,
wrong-typed fields, deep nesting; errors are 4xx naming the field and never cost the
client its keep-alive connection."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, Project, ServerSettings
from fim.server.app import create_app
from fim.server.bodies import MAX_JSON_DEPTH
from fim.server.http import Guard
from fim.testing.server import ServerThread

LIMIT = 4096


def _snapshot(root: Path) -> Snapshot:
    (root / "echo.script.yaml").write_text('- text: "hello"\n')
    agent = AgentDecl(name="echo", model="scripted:echo.script.yaml")
    project = Project(
        name="input",
        state=f"sqlite:///{root / 'state.db'}",
        server=ServerSettings(max_body_bytes=LIMIT),
    )
    return Snapshot(root=root, project=project, agents={"echo": agent}, version="v1")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with ServerThread(create_app(SnapshotHolder(_snapshot(tmp_path)))) as srv:
        yield srv.url


def _local_port(response: httpx.Response) -> int:
    """The client-side port of the connection the response came on."""
    return int(response.extensions["network_stream"].get_extra_info("client_addr")[1])


def test_chunked_body_over_the_limit_is_413(server: str):
    def chunks() -> Iterator[bytes]:  # no Content-Length: httpx sends it chunked
        yield b'{"input": "'
        for _ in range(3):
            yield b"x" * 2000
        yield b'"}'

    json_body = {"Content-Type": "application/json"}
    response = httpx.post(f"{server}/v1/agents/echo/runs", content=chunks(), headers=json_body)
    assert response.status_code == 413
    assert str(LIMIT) in response.json()["error"]["message"]
    assert response.headers["connection"] == "close"
    small = httpx.post(
        f"{server}/v1/agents/echo/runs",
        content=iter([b'{"input": ', b'"hi"}']),
        headers=json_body,
    )  # chunked but within the limit
    assert small.status_code == 200 and small.json()["output"] == "hello"


async def test_reading_stops_at_the_limit(tmp_path: Path):
    """An endless chunked body: the guard stops receiving once past the limit."""
    received = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app must not see an oversized body")

    holder = SnapshotHolder(_snapshot(tmp_path))
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    scope = {"type": "http", "path": "/v1/agents/echo/runs", "headers": headers, "method": "POST"}
    await Guard(app, holder)(scope, receive, send)
    assert sent[0]["status"] == 413
    assert received == LIMIT // 1000 + 1


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/agents/echo/runs", {"input": "hi", "session_id": [1]}, "session_id"),
        ("/v1/agents/echo/runs", {"input": 5}, "input"),
        ("/v1/agents/echo/runs", {"messages": [{"role": "robot"}]}, "messages.0.role"),
        ("/v1/agents/echo/runs", {"input": "hi", "stream": {"yes": 1}}, "stream"),
        ("/v1/chat/completions", {"model": {}, "messages": [{"role": "user"}]}, "model"),
        (
            "/v1/chat/completions",
            {
                "model": "echo",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": True,
            },
            "stream_options",
        ),
        ("/v1/chat/completions", {"model": "echo", "messages": []}, "messages"),
        (
            "/v1/chat/completions",
            {"model": "echo", "messages": [{"content": 1}]},
            "messages.0.role",
        ),
        ("/v1/approvals/abc", {"decision": []}, "decision"),
        ("/v1/approvals/abc", {"decision": "approve", "data": "x"}, "data"),
    ],
)
def test_wrong_types_are_400_with_the_field_path(
    server: str, path: str, body: dict[str, Any], field: str
):
    response = httpx.post(server + path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field
    assert error["message"].startswith(f"{field}: ")


def test_deep_nesting_is_400(server: str):
    for depth in (MAX_JSON_DEPTH + 1, 100_000):
        raw = '{"input": "hi", "extra": ' + "[" * depth + "]" * depth + "}"
        if len(raw) > LIMIT:
            raw = '{"input": "hi", "extra": ' + "[" * 2000 + "]" * 2000 + "}"
        response = httpx.post(
            f"{server}/v1/agents/echo/runs",
            content=raw,
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 400, response.text
        message = response.json()["error"]["message"]
        assert "nested deeper" in message or "recursion limit" in message


def test_shallow_nesting_is_accepted(server: str):
    # one level under the cap as a whole (body, messages, message, content, part: 5), where
    # a body takes any JSON: a content part's keys (an unknown top-level field of a native
    # body is a 400 of its own, newcomer-49 #1)
    depth = MAX_JSON_DEPTH - 6
    extra = json.loads("[" * depth + "]" * depth)
    part = {"type": "text", "text": "hi", "x": extra}
    body = {"model": "echo", "messages": [{"role": "user", "content": [part]}]}
    response = httpx.post(f"{server}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text


def test_an_error_keeps_the_keep_alive_connection(server: str):
    with httpx.Client(base_url=server) as client:
        bad = client.post("/v1/agents/echo/runs", json={"input": "hi", "session_id": [1]})
        assert bad.status_code == 400
        broken = client.post(
            "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]["message"]
        good = client.post("/v1/agents/echo/runs", json={"input": "hi"})
        assert good.status_code == 200 and good.json()["output"] == "hello"
        assert _local_port(bad) == _local_port(broken) == _local_port(good)


def test_an_unhandled_error_is_a_500_that_keeps_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from fim.server import agent_routes

    def explode(api: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(agent_routes, "status_payload", explode)  # `/v1/status` raises
    app = create_app(SnapshotHolder(_snapshot(tmp_path)))
    with ServerThread(app) as srv, httpx.Client(base_url=srv.url) as client:
        failed = client.get("/v1/status")
        assert failed.status_code == 500 and "boom" not in failed.text
        ok = client.get("/v1/agents")
        assert ok.status_code == 200
        assert _local_port(failed) == _local_port(ok)
