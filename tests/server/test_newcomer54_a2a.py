"""What an A2A client sees of a fim run (newcomer-54 #1, #6, #9), driven by the a2a-sdk
client against a real uvicorn, as tests/server/test_a2a_serve.py:

- the answer artifact is sent once, whole, as its own last chunk (`lastChunk: true`): ADK's
  `RemoteA2aAgent` takes an artifact update without it for a partial chunk and never keeps
  it in its session;
- the `working` status updates say what the run does (each tool call, the answer) in their
  message, as ADK's own A2A server does; metadata still carries every event;
- a run waiting on a `confirm` approval is `input-required`, its message naming the approval
  and how to decide it, and is `working` again once it is decided;
- a quiet stream gets SSE comments (keep-alives), so a client's read timeout does not end it;
- fim's internal card has every field the spec requires: the SDK logged "AgentCard is not
  spec-compliant" at the first A2A request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from fim.testing.server import ServerThread
from tests.server.test_a2a_serve import KEY, card, exchange, outcome, request

WORKING, WAITING = pb.TaskState.TASK_STATE_WORKING, pb.TaskState.TASK_STATE_INPUT_REQUIRED


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    root = tmp_path_factory.mktemp("a2a54")
    script = '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "42"\n'
    files = {
        "fim.yaml": (
            f'name: a2a54\nstate: "sqlite:///.fim/state.db"\nserver: {{api_keys: [{KEY}]}}\n'
        ),
        "agents/math.yaml": "model: scripted:math.yaml\ntools: [calculator]\n",
        "math.yaml": script,
        "agents/careful.yaml": (
            "model: scripted:math.yaml\ntools: [calculator]\n"
            "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 120}\n"
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with ServerThread(create_app(SnapshotHolder(compile_project(Path(root))))) as srv:
        yield srv.url


def agent(url: str, name: str) -> pb.AgentCard:
    return card(url, f"/a2a/{name}/.well-known/agent-card.json")


def said(responses: list[Any]) -> list[tuple[int, str]]:
    """(state, text) of each status update that says something."""
    updates = [r.status_update for r in responses if r.HasField("status_update")]
    return [
        (u.status.state, "".join(p.text for p in u.status.message.parts))
        for u in updates
        if u.status.HasField("message")
    ]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_the_answer_is_one_artifact_that_is_its_own_last_chunk(served: str, version: str):
    from tests.server.test_a2a_serve import only

    math = only(agent(served, "math"), version)
    responses = asyncio.run(asyncio.wait_for(exchange(math, "6*7?", streaming=True), 30))
    (update,) = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    assert update.last_chunk and not update.append
    assert update.artifact.name == "answer"
    assert [p.text for p in update.artifact.parts] == ["42"]
    assert outcome(responses)[0] == pb.TaskState.TASK_STATE_COMPLETED


def test_the_answer_is_a_last_chunk_on_the_wire_too(served: str):
    """The 0.3 JSON an ADK client parses: `lastChunk: true` on the answer's update."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {
            "message": {
                "role": "user",
                "messageId": "m-1",
                "kind": "message",
                "parts": [{"kind": "text", "text": "6*7?"}],
            }
        },
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", f"{served}/a2a/math", json=body, headers=headers) as answer:
        lines = [line for line in answer.iter_lines() if '"artifact-update"' in line]
    assert len(lines) == 1 and '"lastChunk":true' in lines[0].replace(" ", "")


def test_working_updates_say_the_tool_calls_and_the_answer(served: str):
    responses = asyncio.run(
        asyncio.wait_for(exchange(agent(served, "math"), "6*7?", streaming=True), 30)
    )
    lines = said(responses)
    assert (WORKING, 'calling calculator {"expression": "6*7"}') in lines
    assert lines[-1] == (WORKING, "42")  # the answer, then the artifact and the end
    updates = [r.status_update for r in responses if r.HasField("status_update")]
    events = [u.metadata["fim_event"] for u in updates if "fim_event" in u.metadata]
    assert events[0] == "run_started" and "tool_result" in events  # metadata: every event


def test_a_pending_approval_is_input_required_and_the_stream_stays_alive(
    served: str, monkeypatch: pytest.MonkeyPatch
):
    """While the run waits, the task is `input-required` with the approval's id and how to
    decide it, and its stream carries SSE comments (a default a2a-sdk client, 5 s between
    bytes, gave up); once approved, the run goes on to its answer on the same stream."""
    from sse_starlette.sse import EventSourceResponse

    from fim.server.a2a_progress import KEEPALIVE

    assert httpx.Timeout(5.0).read > KEEPALIVE  # httpx's default, an a2a-sdk client's
    monkeypatch.setattr("fim.server.a2a_surface.KEEPALIVE", 0.05)
    monkeypatch.setattr(EventSourceResponse, "DEFAULT_PING_INTERVAL", 3600)  # not its own
    careful = agent(served, "careful")

    async def main() -> tuple[list[Any], list[str]]:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(careful)
        got: list[Any] = []
        try:
            async for r in client.send_message(request("6*7?")):
                got.append(r)
                if r.HasField("status_update") and r.status_update.status.state == WAITING:
                    raw = await quiet_stream_comments(http)
                    approval = r.status_update.metadata["approval_id"]
                    decided = await http.post(
                        f"{served}/v1/approvals/{approval}", json={"decision": "approve"}
                    )
                    assert decided.status_code == 200, decided.text
            return got, raw
        finally:
            await client.close()
            await http.aclose()

    async def quiet_stream_comments(http: httpx.AsyncClient) -> list[str]:
        """A second task of the same agent, read raw while it waits for its approval: the
        lines of its stream once its `input-required` update has come."""
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "message/stream",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": "m-2",
                    "kind": "message",
                    "parts": [{"kind": "text", "text": "again"}],
                }
            },
        }
        lines: list[str] = []
        version = {"A2A-Version": "0.3"}  # the a2a-sdk client's httpx says 1.0
        quiet = httpx.Timeout(30, read=5.0)  # no byte for 5 s: a ReadTimeout
        async with http.stream(
            "POST", f"{served}/a2a/careful", json=body, headers=version, timeout=quiet
        ) as answer:
            waiting = False
            async for line in answer.aiter_lines():
                waiting = waiting or '"input-required"' in line
                if waiting and line.startswith(":"):
                    lines.append(line)
                    break
        return lines

    responses, comments = asyncio.run(asyncio.wait_for(main(), 60))
    waits = [(s, t) for s, t in said(responses) if s == WAITING]
    assert len(waits) == 1
    text = waits[0][1]
    assert "approval" in text and "calculator" in text
    assert "POST /v1/approvals/" in text and '{"decision": "approve"}' in text
    assert outcome(responses)[:2] == (pb.TaskState.TASK_STATE_COMPLETED, "42")
    states = [r.status_update.status.state for r in responses if r.HasField("status_update")]
    assert states[states.index(WAITING) + 1] == WORKING  # decided: working again
    assert comments and comments[0].startswith(": ping")  # sse_starlette's keep-alive


def test_the_first_a2a_request_logs_no_card_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text("name: cardless\n")
    (tmp_path / "agents/math.yaml").write_text("model: scripted:math.yaml\n")
    (tmp_path / "math.yaml").write_text('- text: "42"\n')
    caplog.set_level(logging.WARNING)
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        responses = asyncio.run(
            asyncio.wait_for(exchange(agent(srv.url, "math"), "hi", streaming=False), 30)
        )
    assert outcome(responses)[1] == "42"
    assert not [r for r in caplog.records if "spec-compliant" in r.getMessage()]
