"""Newcomer 49's HTTP findings.

- #1: a native JSON body (`POST /v1/agents/{name}/runs`, `/v1/workflows/{name}/runs`,
  `/v1/approvals/{id}`, `/v1/evals/{suite}/runs`) with an unknown top-level field is a 400
  naming it (`param`) with a did-you-mean, a camelCase name mapped to its snake_case field;
  it was dropped with 200 OK, so `"sesion_id"` started every turn afresh. The OpenAPI
  document says so too (`additionalProperties: false`).
- #3: a call a `confirm` hook holds no longer holds its request silently: the OpenAI
  stream carries an SSE comment naming the approval (which the real `openai` client skips:
  the stream still parses), and a non-streamed request logs one WARNING naming the route,
  the run and the approval.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.testing.cluster import until
from fim.testing.server import ServerThread

FILES = {
    "fim.yaml": 'name: n49\nstate: "sqlite:///.fim/state.db"\n',
    "agents/assistant.yaml": "description: says hi\nmodel: scripted:hi.script.yaml\n",
    "hi.script.yaml": '- text: "hi"\n- text: "hi again"\n',
    # asks a human before its one tool call; decided or not within 20 s, the run goes on
    "agents/careful.yaml": (
        "description: asks first\nmodel: scripted:careful.script.yaml\ntools: [calculator]\n"
        "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 20}\n"
    ),
    "careful.script.yaml": (
        '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "6 x 7 = 42"\n'
    ),
    "workflows/sum.yaml": (
        "inputs: {x: {type: number}}\n"
        "nodes:\n  add: {type: tool, tool: calculator, args: {expression: '{{ inputs.x }}+1'}}\n"
    ),
    "evals/assistant.yaml": (
        "agent: assistant\ncases:\n  - {name: hi, input: hi, expect: [{contains: hi}]}\n"
    ),
}

COMMENT = re.compile(
    r'^: approval (?P<id>[0-9a-f]+) needed: POST /v1/approvals/(?P=id) \{"decision": "approve"\}$'
)


def write_project(root: Path) -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def app(tmp_path: Path) -> Any:
    return create_app(SnapshotHolder(compile_project(write_project(tmp_path))))


@pytest.fixture
def client(app: Any) -> Iterator[TestClient]:
    with TestClient(app, base_url="http://localhost") as c:
        yield c


@pytest.fixture
def served(app: Any) -> Iterator[str]:
    with ServerThread(app) as srv:
        yield srv.url


# ------------------------------------------------------------------ #1 unknown body fields


RUNS = "/v1/agents/assistant/runs"


@pytest.mark.parametrize(
    ("route", "body", "field", "meant"),
    [
        (RUNS, {"input": "Tip?", "sesion_id": "web1"}, "sesion_id", "session_id"),
        (RUNS, {"input": "Tip?", "strem": True}, "strem", "stream"),
        (RUNS, {"input": "Tip?", "sessionId": "web1"}, "sessionId", "session_id"),
        ("/v1/workflows/sum/runs", {"inputs": {"x": 1}, "strem": True}, "strem", "stream"),
        ("/v1/workflows/sum/runs", {"input": {"x": 1}}, "input", "inputs"),
        ("/v1/approvals/abc123", {"decision": "approve", "By": "me"}, "By", "by"),
        ("/v1/evals/assistant/runs", {"mod": "replay"}, "mod", "mode"),
    ],
)
def test_an_unknown_field_of_a_native_body_is_a_400_naming_it(
    client: TestClient, route: str, body: dict[str, Any], field: str, meant: str
) -> None:
    answer = client.post(route, json=body)

    assert answer.status_code == 400, answer.text
    problem = answer.json()["error"]
    assert problem["param"] == field
    assert problem["message"].startswith(f"unknown field '{field}' (did you mean '{meant}'?)")
    assert client.get("/v1/runs").json()["runs"] == []  # nothing ran on a body it misread


def test_a_field_nothing_is_close_to_lists_the_valid_ones(client: TestClient) -> None:
    answer = client.post("/v1/agents/assistant/runs", json={"input": "hi", "temprature": 0})

    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "unknown field 'temprature' (valid fields: input, messages, session_id, stream, background)"
    )


def test_the_corrected_body_continues_the_conversation(client: TestClient) -> None:
    """What the misspelt body meant: the second turn continues session web1."""
    route = "/v1/agents/assistant/runs"
    assert client.post(route, json={"input": "Tip?", "sesion_id": "web1"}).status_code == 400

    first = client.post(route, json={"input": "Tip?", "session_id": "web1"}).json()
    second = client.post(route, json={"input": "And now?", "session_id": "web1"}).json()

    assert (first["session_id"], second["session_id"]) == ("web1", "web1")
    stored = client.get("/v1/sessions/web1").json()
    said = [m["content"] for m in stored["messages"] if m["role"] == "user"]
    assert said == ["Tip?", "And now?"]


def test_the_openapi_document_says_native_bodies_take_no_other_field(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]

    for body in ("RunBody", "WorkflowRunBody", "DecisionBody", "EvalRunBody", "ChatBody"):
        assert schemas[body]["additionalProperties"] is False, body


# ------------------------------------------------------------------ #3 a held request


def test_the_openai_stream_names_the_approval_it_waits_on(served: str) -> None:
    """What curl shows: a comment line naming the approval and how to decide it."""
    body = {"model": "careful", "messages": [{"role": "user", "content": "6*7?"}], "stream": True}
    comments: list[str] = []
    data: list[str] = []
    with httpx.stream("POST", f"{served}/v1/chat/completions", json=body, timeout=60) as answer:
        for line in answer.iter_lines():
            if line.startswith(":"):
                comments.append(line)
                found = COMMENT.match(line)
                assert found is not None, line
                decided = httpx.post(
                    f"{served}/v1/approvals/{found['id']}", json={"decision": "approve"}
                )
                assert decided.status_code == 200, decided.text
            elif line.startswith("data: "):
                data.append(line[6:])

    assert len(comments) == 1
    assert data[-1] == "[DONE]"
    text = "".join(
        json.loads(d)["choices"][0]["delta"].get("content") or ""
        for d in data[:-1]
        if json.loads(d)["choices"]
    )
    assert text == "6 x 7 = 42"


class _Tee(httpx.BaseTransport):
    """An HTTP transport that keeps every byte the server sent, and approves the approval a
    stream's comment names as it passes (what a client reading the raw stream would do)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.inner = httpx.HTTPTransport()
        self.seen = bytearray()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        tee = self

        class Stream(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                for chunk in response.stream:  # type: ignore[union-attr]
                    tee.seen.extend(chunk)
                    for line in bytes(chunk).decode().splitlines():
                        if found := COMMENT.match(line):
                            httpx.post(
                                f"{tee.url}/v1/approvals/{found['id']}",
                                json={"decision": "approve"},
                            )
                    yield chunk

            def close(self) -> None:
                response.close()

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=Stream(),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self.inner.close()


def test_the_openai_client_parses_a_stream_carrying_the_approval_comment(served: str) -> None:
    import openai

    tee = _Tee(served)
    with httpx.Client(transport=tee, timeout=60) as http:
        client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", http_client=http)
        chunks = list(
            client.chat.completions.create(
                model="careful", messages=[{"role": "user", "content": "6*7?"}], stream=True
            )
        )

    assert b"\n: approval " in bytes(tee.seen)  # the stream carried the comment
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "6 x 7 = 42"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_held_plain_request_is_named_in_the_server_log(
    served: str, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"model": "careful", "messages": [{"role": "user", "content": "6*7?"}]}
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{served}/v1/chat/completions", json=body, timeout=60)
        )
    )
    with caplog.at_level(logging.WARNING, logger="fim.server"):
        request.start()

        def pending() -> str | None:
            items = httpx.get(f"{served}/v1/approvals").json()["approvals"]
            return next((item["id"] for item in items), None)

        approval = until(pending, what="the careful run's approval")
        until(lambda: "waits for approval" in caplog.text, what="the log line")
        httpx.post(f"{served}/v1/approvals/{approval}", json={"decision": "approve"})
        request.join(timeout=60)

    run_id = answers[0].json()["fim"]["run_id"]
    lines = [r.getMessage() for r in caplog.records if "waits for approval" in r.getMessage()]
    assert lines == [
        f"POST /v1/chat/completions: run {run_id} waits for approval {approval}; the request "
        f"is held until it is decided (POST /v1/approvals/{approval}) or expires"
    ]
    assert answers[0].json()["choices"][0]["message"]["content"] == "6 x 7 = 42"
