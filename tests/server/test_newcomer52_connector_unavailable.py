"""Newcomer 52 #5: a run of an agent whose connector is unavailable (its `${VAR}` is not
set where fim serves) is the server's configuration, not an internal error.

A commit added `connectors/pager.yaml` (`token: "${PAGER_TOKEN}"`) for the agent `triage`
before the secret was deployed. Its runs answered 500 `server_error`, as a crash would.
Now each surface answers the way a missing model key answers (`model_not_configured`):
a 503 with the code `connector_unavailable`, `x-should-retry: false`, and a message
naming the variable and the connector's file; a streamed run is refused before its stream
opens (a 503, not a 200 stream whose only frame is an error). The run is still recorded
with its `refused` error event, and counted as an `error` in `fim_runs_total`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from fim import observe
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app

FILES = {
    "fim.yaml": 'name: n52\nstate: "sqlite:///.fim/state.db"\n',
    "agents/triage.yaml": (
        "description: pages someone\nmodel: scripted:hi.script.yaml\nconnectors: [pager]\n"
    ),
    "agents/plain.yaml": "description: no connector\nmodel: scripted:hi.script.yaml\n",
    "hi.script.yaml": '- text: "hi"\n',
    "connectors/pager.yaml": (
        "kind: http\ndescription: Paging API\nbase_url: http://127.0.0.1:9\n"
        'auth: {type: bearer, token: "${PAGER_TOKEN}"}\n'
        "actions:\n  page:\n    description: Page someone\n    method: GET\n"
        "    path: /page\n"
    ),
}


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("PAGER_TOKEN", raising=False)
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    app = create_app(SnapshotHolder(compile_project(tmp_path)))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def _is_refusal(answer: Any) -> dict[str, Any]:
    """The answer is the 503 `connector_unavailable`, not retried, naming the variable."""
    assert answer.status_code == 503, answer.text
    assert answer.headers["x-should-retry"] == "false"
    problem: dict[str, Any] = answer.json()["error"]
    assert problem["code"] == "connector_unavailable"
    assert problem["type"] == "server_error"
    assert "connector 'pager' is unavailable: PAGER_TOKEN not set" in problem["message"]
    assert "connectors/pager.yaml:" in problem["message"]
    return problem


def _only_run(client: TestClient) -> dict[str, Any]:
    runs = client.get("/v1/runs", params={"agent": "triage"}).json()["runs"]
    assert len(runs) == 1
    record: dict[str, Any] = client.get(f"/v1/runs/{runs[0]['id']}").json()
    return record


def test_a_json_run_answers_503_connector_unavailable_and_is_recorded(
    client: TestClient,
) -> None:
    _is_refusal(client.post("/v1/agents/triage/runs", json={"input": "page bob"}))
    record = _only_run(client)
    assert record["status"] == "error"
    (event,) = record["data"]["events"]
    assert (event["type"], event["kind"]) == ("error", "refused")
    assert "PAGER_TOKEN" in event["message"]


def test_a_streamed_run_is_refused_before_its_stream_opens(client: TestClient) -> None:
    answer = client.post("/v1/agents/triage/runs", json={"input": "x", "stream": True})
    assert answer.headers["content-type"].startswith("application/json")
    _is_refusal(answer)
    assert _only_run(client)["status"] == "error"


def test_the_openai_endpoint_answers_the_same_streamed_or_not(client: TestClient) -> None:
    body = {"model": "triage", "messages": [{"role": "user", "content": "x"}]}
    _is_refusal(client.post("/v1/chat/completions", json=body))
    _is_refusal(client.post("/v1/chat/completions", json={**body, "stream": True}))


def test_other_agents_still_run_and_stream(client: TestClient) -> None:
    answer = client.post("/v1/agents/plain/runs", json={"input": "x"})
    assert (answer.status_code, answer.json()["output"]) == (200, "hi")
    streamed = client.post("/v1/agents/plain/runs", json={"input": "x", "stream": True})
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert "event: run_finished" in streamed.text
    body = {"model": "plain", "messages": [{"role": "user", "content": "x"}], "stream": True}
    chunks = client.post("/v1/chat/completions", json=body).text.split("\n\n")
    first = json.loads(chunks[0].removeprefix("data: "))
    assert first["choices"][0]["delta"]["role"] == "assistant"  # the role chunk comes first
    assert "data: [DONE]" in chunks


def test_a_refused_run_counts_as_an_error_in_the_metrics(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("prometheus_client")
    from fim.observe.metrics import METRICS

    monkeypatch.setattr(observe, "_metrics", True)
    before = METRICS.c_runs("triage", "error")._value.get()
    client.post("/v1/agents/triage/runs", json={"input": "x"})
    assert METRICS.c_runs("triage", "error")._value.get() == before + 1
