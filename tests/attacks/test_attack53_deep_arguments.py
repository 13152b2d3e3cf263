"""A model's tool call whose arguments nest far deeper than the 64 levels the registry
accepts is refused to the model like any invalid call, on every surface (attack-53 F1).

The `tool_call` event carried the arguments whole, and the JSON encoders refuse a value
~900 levels deep: `fim run` ended in a traceback with nothing recorded, `fim serve`
answered 500 (a stream was cut without an error event) and stored the run `cancelled`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.testing.runs import run_events
from tests.inprocess_cli import run_fim

DEEP = '{"expression": "1+1", "a":' + '{"a":' * 900 + '"1"' + "}" * 901


def project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: d\nstate: "sqlite:///.fim/state.db"\n')
    steps = [{"tool_call": {"name": "calculator", "arguments": DEEP}}, {"text": "done"}]
    (root / "deep.json").write_text(json.dumps(steps))
    (root / "agents" / "deep.yaml").write_text(
        "description: d\nmodel: scripted:deep.json\ntools: [calculator]\n"
    )
    return root


async def test_the_run_refuses_the_call_to_the_model_and_goes_on(tmp_path: Path) -> None:
    events = await run_events(compile_project(project(tmp_path / "p")), "deep", "go")
    (call,) = [e for e in events if e.type == "tool_call"]
    (result,) = [e for e in events if e.type == "tool_result"]
    assert call.arguments == {"(not shown)": "the arguments are nested more than 64 levels deep"}
    assert result.is_error and "nested more than 64 levels deep" in result.content
    assert events[-1].type == "run_finished" and events[-1].status == "ok"
    json.dumps([e.model_dump(mode="json") for e in events])  # every event can be encoded


def test_fim_run_answers_and_records_the_run(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    done = run_fim("run", "deep", "go", "--project", str(root), cwd=root, timeout=60)
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    assert "Traceback" not in done.stderr
    listed = run_fim("runs", "list", "--project", str(root), cwd=root, timeout=60)
    assert "deep" in listed.stdout and "ok" in listed.stdout


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(SnapshotHolder(compile_project(project(tmp_path / "p"))))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def test_fim_serve_answers_and_streams_the_refusal(client: TestClient) -> None:
    answer = client.post("/v1/agents/deep/runs", json={"input": "go"})
    assert answer.status_code == 200 and answer.json()["status"] == "ok"
    streamed = client.post("/v1/agents/deep/runs", json={"input": "go", "stream": True})
    assert "nested more than 64 levels deep" in streamed.text
    assert '"run_finished"' in streamed.text


def test_a_run_that_ends_in_an_internal_error_is_recorded_as_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any exception out of a run was recorded `cancelled`, as if the client had left."""
    from fim.events import RunStarted
    from fim.run import agent as agent_module

    async def broken(snapshot: object, agent: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        yield RunStarted(run_id=str(kwargs["run_id"]), agent=agent, input="go")
        raise RuntimeError("boom")

    monkeypatch.setattr(agent_module, "run_agent", broken)
    app = create_app(SnapshotHolder(compile_project(project(tmp_path / "p"))))
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as c:
        assert c.post("/v1/agents/deep/runs", json={"input": "go"}).status_code == 500
        (run,) = c.get("/v1/runs").json()["runs"]
        assert run["status"] == "error"
