"""The OpenAI endpoint names the run of every answer, streamed too, and hints a misspelt
fim field as the native routes do (newcomer-54 #12, #13).

- `/v1/chat/completions` answers carry an `x-fim-run-id` header, streamed or not; a
  streamed answer's first chunk carries `fim: {run_id}` (a non-streamed one has `fim:
  {run_id, status}`), and that id is the run `GET /v1/runs/{id}` shows.
- `sessionId` (camelCase, as JS clients write it) is a 400 whose `hint` is
  `did you mean 'session_id'?`, as on `/v1/agents/{name}/runs`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app

FILES = {
    "fim.yaml": 'name: n54\nstate: "sqlite:///.fim/state.db"\n',
    "agents/assistant.yaml": "description: says hi\nmodel: scripted:hi.script.yaml\n",
    "hi.script.yaml": '- text: "hi"\n- text: "hi again"\n',
}
CHAT = "/v1/chat/completions"
ASK = {"model": "assistant", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    app = create_app(SnapshotHolder(compile_project(tmp_path)))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def _chunks(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: {")
    ]


def test_a_non_streamed_answer_names_its_run_in_a_header_and_its_body(client: TestClient):
    answer = client.post(CHAT, json=ASK)

    assert answer.status_code == 200
    run_id = answer.headers["x-fim-run-id"]
    assert answer.json()["fim"] == {"run_id": run_id, "status": "ok"}
    assert client.get(f"/v1/runs/{run_id}").json()["name"] == "assistant"


def test_a_streamed_answer_names_its_run_in_a_header_and_its_first_chunk(client: TestClient):
    with client.stream("POST", CHAT, json={**ASK, "stream": True}) as answer:
        run_id = answer.headers["x-fim-run-id"]
        chunks = _chunks(answer.read().decode())

    first, *rest = chunks
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert first["fim"] == {"run_id": run_id}
    assert all("fim" not in c for c in rest)  # once is enough; the rest are OpenAI's shape
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in rest) == "hi"
    assert client.get(f"/v1/runs/{run_id}").json()["name"] == "assistant"


@pytest.mark.parametrize(("field", "meant"), [("sessionId", "session_id"), ("strem", "stream")])
def test_a_misspelt_field_gets_the_did_you_mean_of_the_native_routes(
    client: TestClient, field: str, meant: str
):
    answer = client.post(CHAT, json={**ASK, field: "x"})

    assert answer.status_code == 400
    problem = answer.json()["error"]
    assert problem["param"] == field and problem["hint"] == f"did you mean '{meant}'?"
    assert problem["message"].startswith(f"unrecognized request argument '{field}'")
    assert f"(did you mean '{meant}'?)" in problem["message"]  # what the SDKs print


def test_a_field_nothing_is_close_to_gets_no_guess(client: TestClient):
    answer = client.post(CHAT, json={**ASK, "frobnicate": 1})

    assert answer.status_code == 400 and "hint" not in answer.json()["error"]
