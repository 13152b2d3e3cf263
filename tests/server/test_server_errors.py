"""`fim serve` when things fail: model failures are HTTP errors (OpenAI error objects, an SSE
`error` event), one access line per request and one line per failed run, a start-up banner,
and a port in use named with the option that changes it."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import httpx
import pytest

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project, ServerSettings
from fim.errors import RunError
from fim.server import banner, bind, refuse_open
from fim.server.app import create_app
from fim.testing.server import ServerThread
from fim.version import fim_version


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def broken_snapshot(root: Path) -> Snapshot:
    """An agent whose model endpoint refuses connections (nothing listens there)."""
    down = ModelSettings(
        model="openai/local", api_base=f"http://127.0.0.1:{_closed_port()}/v1", max_retries=0
    )
    agent = AgentDecl(name="local", model=down)
    project = Project(name="broken", state=f"sqlite:///{root / 'state.db'}")
    return Snapshot(root=root, project=project, agents={"local": agent})


def test_a_model_failure_is_a_502_error_object_and_one_log_line_per_failed_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from openai import APIError, InternalServerError, OpenAI

    caplog.set_level(logging.INFO)
    with ServerThread(create_app(SnapshotHolder(broken_snapshot(tmp_path)))) as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)
        hello = [{"role": "user", "content": "hello"}]
        with pytest.raises(InternalServerError) as caught:
            client.chat.completions.create(model="local", messages=hello)
        assert caught.value.status_code == 502
        error = caught.value.body
        assert isinstance(error, dict) and error["type"] == "api_error"
        assert error["code"] == "model_error" and error["param"] is None
        assert "cannot connect to" in error["message"]

        with pytest.raises(APIError) as streamed:  # the SSE `error` event, raised by the SDK
            list(client.chat.completions.create(model="local", messages=hello, stream=True))
        assert "cannot connect to" in streamed.value.message

        native = httpx.post(f"{srv.url}/v1/agents/local/runs", json={"input": "hello"})
        assert native.status_code == 502 and native.json()["status"] == "error"
        assert native.json()["error"]["code"] == "model_error" and native.json()["run_id"]

        sse = httpx.post(f"{srv.url}/v1/agents/local/runs", json={"input": "hi", "stream": True})
        kinds = [line[7:] for line in sse.text.splitlines() if line.startswith("event: ")]
        assert "error" in kinds and kinds[-1] == "run_finished"
    access = [r.getMessage() for r in caplog.records if r.name == "fim.access"]
    assert len(access) == 4 and all("/runs" in a or "/chat/completions" in a for a in access)
    assert '"POST /v1/chat/completions" 502' in access[0]
    failed = [r.getMessage() for r in caplog.records if "failed:" in r.getMessage()]
    assert len(failed) == 4 and all("of agent 'local' failed: model_error:" in f for f in failed)
    body = json.dumps(error)
    assert "Traceback" not in body


def test_the_banner_says_what_is_served_and_a_port_in_use_says_how_to_move(
    tmp_path: Path,
) -> None:
    snapshot = broken_snapshot(tmp_path)
    line = banner(snapshot, "127.0.0.1", 8000, reload=True)
    assert line == (
        "fim serve: project 'broken' · 1 agent, 0 workflows · http://127.0.0.1:8000 "
        "(OpenAI-compatible: /v1) · reload on · auth off (no server.api_keys)"
        f" · store sqlite:///{tmp_path / 'state.db'} · fim {fim_version()}"
    )
    keyed = Project(name="k", server=ServerSettings(api_keys=["s3cret-key"]))
    shown = banner(Snapshot(root=tmp_path, project=keyed), "::1", 9000, reload=False)
    assert "http://[::1]:9000" in shown and "reload off · auth on" in shown
    assert "s3cret" not in shown

    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(RunError) as caught:
            bind("127.0.0.1", port)
    finally:
        taken.close()
    assert caught.value.message == f"port {port} on 127.0.0.1 is already in use"
    assert f"fim serve --port {port + 1}" in (caught.value.hint or "")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "fim.internal"])
def test_a_server_without_keys_refuses_to_listen_beyond_loopback(host: str) -> None:
    """Fail closed: anyone who reaches an open server runs every agent; an empty key (an
    unset `${VAR}`) is no key. Keys, a loopback address or `allow_open` let it start."""
    for open_ in (ServerSettings(), ServerSettings(api_keys=[""], operator_keys=[""])):
        with pytest.raises(RunError) as caught:
            refuse_open(open_, host)
        assert "has no API key" in caught.value.message
        assert "server.allow_open" in (caught.value.hint or "")
    refuse_open(ServerSettings(api_keys=["k"]), host)
    refuse_open(ServerSettings(operator_keys=["ops"]), host)
    refuse_open(ServerSettings(allow_open=True), host)
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        refuse_open(ServerSettings(), loopback)


def test_fim_serve_on_an_open_address_stops_with_the_fix_and_binds_nothing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fim.cli import app

    (tmp_path / "fim.yaml").write_text('name: open\nstate: "sqlite:///.fim/state.db"\n')
    result = CliRunner().invoke(app, ["serve", "-p", str(tmp_path), "--host", "0.0.0.0"])
    assert result.exit_code != 0
    assert "has no API key" in result.output and "Traceback" not in result.output


def test_a_workflow_the_server_cannot_run_is_a_503_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fim.config.schema import WorkflowDecl

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    workflow = WorkflowDecl.model_validate(
        {"name": "notify", "nodes": {"say": {"type": "llm", "prompt": "Hello"}}}
    )
    project = Project(name="p", state=f"sqlite:///{tmp_path / 'state.db'}")
    snapshot = Snapshot(
        root=tmp_path,
        project=project,
        workflows={"notify": workflow},
        models={"general": ModelSettings(model="openai/gpt-4o-mini")},
    )
    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        reply = httpx.post(f"{srv.url}/v1/workflows/notify/runs", json={"inputs": {}})
        runs = httpx.get(f"{srv.url}/v1/runs").json()["runs"]
    assert reply.status_code == 503 and runs == []
    error = reply.json()["error"]
    assert error["message"].startswith(  # then the hint, which SDKs print
        "workflow 'notify' not started, nothing ran: "
        "node 'say': missing API key for openai/gpt-4o-mini ("
    )
    assert error["hint"].startswith("set OPENAI_API_KEY")


async def test_accepted_connections_send_without_nagle_delay() -> None:
    """asyncio turns Nagle off on an accepted socket only when the listener says TCP; a
    listener made with proto 0 left every keep-alive response waiting ~40 ms for the
    client's delayed ACK (bench: 48 ms p50 per run at one client, 6 ms after)."""
    import asyncio

    listener = bind("127.0.0.1", 0)
    nodelay: list[int] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=listener)
    async with server:
        _, writer = await asyncio.open_connection(*listener.getsockname())
        while not nodelay:
            await asyncio.sleep(0)
        writer.close()
    assert nodelay == [1]
