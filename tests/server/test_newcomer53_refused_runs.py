"""Newcomer 53 #4: a served run refused before it starts (its agent uses a skill that
failed to load) keeps its reason.

The client always heard why (`event: error` naming `SKILL.md:line:col`), but the stored
run had no events at all and the server log said only "the run ended in an internal error
(see the server log)", a line that referred to itself. Now the refusal is the run's
`error` event (kind `refused`, the client's message, masked) and the one WARNING line of
the failed run quotes it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app

FILES = {
    "fim.yaml": 'name: n53\nstate: "sqlite:///.fim/state.db"\n',
    "agents/helper.yaml": (
        "description: uses the skill\nmodel: scripted:hi.script.yaml\nskills: [getting-started]\n"
    ),
    "agents/plain.yaml": "description: no skill\nmodel: scripted:hi.script.yaml\n",
    "hi.script.yaml": '- text: "hi"\n',
    # a colon in a plain scalar: a YAML syntax error at line 3
    "skills/getting-started/SKILL.md": (
        "---\nname: getting-started\ndescription: How: to start\n---\nSay hello.\n"
    ),
}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    app = create_app(SnapshotHolder(compile_project(tmp_path)))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def _only_run(client: TestClient) -> dict[str, Any]:
    runs = client.get("/v1/runs", params={"agent": "helper"}).json()["runs"]
    assert len(runs) == 1
    record = client.get(f"/v1/runs/{runs[0]['id']}").json()
    assert isinstance(record, dict)
    return record


def test_a_streamed_run_refused_for_a_broken_skill_stores_its_reason(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fim.server"):
        answer = client.post("/v1/agents/helper/runs", json={"input": "x", "stream": True})
    # refused before its stream opened: a 503 (newcomer-52 #5), not a one-frame stream
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "agent_unavailable")
    heard = answer.json()["error"]
    assert "skills/getting-started/SKILL.md:3:" in heard["message"]

    record = _only_run(client)
    assert record["status"] == "error"
    (event,) = record["data"]["events"]
    assert event["type"] == "error"
    assert event["kind"] == "refused"
    reason = event["message"].split(" (fix the skill")[0]  # what the client heard
    assert reason in heard["message"] and "SKILL.md:3:" in reason

    (line,) = [r for r in caplog.records if r.name == "fim.server" and "failed" in r.message]
    assert line.levelno == logging.WARNING
    assert record["id"] in line.message
    assert "skills/getting-started/SKILL.md:3:" in line.message
    assert "internal error" not in line.message


def test_a_json_run_refused_the_same_way_is_recorded_the_same_way(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fim.server"):
        answer = client.post("/v1/agents/helper/runs", json={"input": "x"})
    assert "skills/getting-started/SKILL.md:3:" in answer.json()["error"]["message"]
    record = _only_run(client)
    (event,) = record["data"]["events"]
    assert (event["type"], event["kind"]) == ("error", "refused")
    assert "skills/getting-started/SKILL.md:3:" in event["message"]
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]


def test_an_agent_without_the_skill_still_runs(client: TestClient) -> None:
    answer = client.post("/v1/agents/plain/runs", json={"input": "x"})
    assert answer.status_code == 200
    assert answer.json()["output"] == "hi"


def test_a_run_refused_over_the_openai_endpoint_is_recorded_the_same_way(
    client: TestClient,
) -> None:
    body = {"model": "helper", "messages": [{"role": "user", "content": "x"}]}
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code >= 400
    record = _only_run(client)
    (event,) = record["data"]["events"]
    assert (event["type"], event["kind"]) == ("error", "refused")
    assert "skills/getting-started/SKILL.md:3:" in event["message"]
