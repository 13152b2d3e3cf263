"""Newcomer 53 #16: a served run's record names the session it was a turn of, so the dev
page's run detail shows it (and opens it in the Chat); a run without one names none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text('name: n53\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "agents/a.yaml").write_text("description: d\nmodel: scripted:s.yaml\n")
    (tmp_path / "s.yaml").write_text('default: [{text: "ok"}]\n')
    app = create_app(SnapshotHolder(compile_project(tmp_path)))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


@pytest.mark.parametrize("stream", [False, True])
def test_a_runs_record_names_its_session(client: TestClient, stream: bool) -> None:
    body = {"input": "hi", "session_id": "s-support-7", "stream": stream}
    assert client.post("/v1/agents/a/runs", json=body).status_code == 200
    (run,) = client.get("/v1/runs").json()["runs"]
    assert client.get(f"/v1/runs/{run['id']}").json()["data"]["session_id"] == "s-support-7"


def test_a_run_without_a_session_names_none(client: TestClient) -> None:
    assert client.post("/v1/agents/a/runs", json={"input": "hi"}).status_code == 200
    (run,) = client.get("/v1/runs").json()["runs"]
    assert "session_id" not in client.get(f"/v1/runs/{run['id']}").json()["data"]
