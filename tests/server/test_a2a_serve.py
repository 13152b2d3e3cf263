"""fim as an A2A agent (issue 20): agent cards and JSON-RPC `SendMessage` /
`SendStreamingMessage` (A2A 1.0) and `message/send` / `message/stream` (0.3), driven by the
`a2a-sdk` client from PyPI against a real uvicorn."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.run.test_run_owners import assert_only_owner_sees, run_ids

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError

from fim.run.sessions import session_key
from fim.server.http import key_owner
from fim.testing.server import ServerThread

KEY, OTHER_KEY = "a2a-alice-k3y-9090", "a2a-bob-k3y-8080"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    root = tmp_path_factory.mktemp("a2ademo")
    files = {
        "fim.yaml": (
            "name: a2ademo\ndescription: Arithmetic over A2A\n"
            'state: "sqlite:///.fim/state.db"\n'
            f"server: {{api_keys: [{KEY}, {OTHER_KEY}]}}\n"
        ),
        "agents/math.yaml": (
            "description: Does arithmetic with a calculator\n"
            "model: scripted:math.script.yaml\ntools: [calculator]\n"
        ),
        "math.script.yaml": (
            '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n'
            f'- text: "The answer is 42. (key {KEY})"\n'
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    app = create_app(SnapshotHolder(compile_project(Path(root))))
    with ServerThread(app) as srv:
        yield srv.url, app.state.api


def card(url: str, path: str = "/.well-known/agent-card.json", key: str = KEY) -> pb.AgentCard:
    from google.protobuf.json_format import ParseDict

    body = httpx.get(url + path, headers={"Authorization": f"Bearer {key}"}).json()
    return ParseDict(body, pb.AgentCard(), ignore_unknown_fields=True)


def request(text: str, context_id: str | None = None) -> pb.SendMessageRequest:
    message = pb.Message(
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text=text)],
        message_id=uuid.uuid4().hex,
        context_id=context_id or "",
    )
    return pb.SendMessageRequest(message=message)


async def exchange(
    agent_card: pb.AgentCard, text: str, *, streaming: bool, key: str = KEY, **kw: Any
) -> list[Any]:
    """Every StreamResponse the a2a-sdk client yields for one message."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(agent_card)
    try:
        return [r async for r in client.send_message(request(text, **kw))]
    finally:
        await client.close()
        await http.aclose()


async def get_task(agent_card: pb.AgentCard, task_id: str, key: str) -> pb.Task:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    client = ClientFactory(ClientConfig(httpx_client=http)).create(agent_card)
    try:
        return await client.get_task(pb.GetTaskRequest(id=task_id))
    finally:
        await client.close()
        await http.aclose()


def outcome(responses: list[Any]) -> tuple[int, str, str]:
    """(final task state, answer text, last status message text) of an exchange: a
    non-streaming reply is one Task; a stream is the Task, then status and artifact updates."""
    state, answer, said = 0, "", ""
    for r in responses:
        if r.HasField("task"):
            state = r.task.status.state
            answer = "".join(p.text for a in r.task.artifacts for p in a.parts) or answer
            said = "".join(p.text for p in r.task.status.message.parts) or said
        elif r.HasField("status_update"):
            state = r.status_update.status.state
            said = "".join(p.text for p in r.status_update.status.message.parts) or said
        elif r.HasField("artifact_update"):
            answer += "".join(p.text for p in r.artifact_update.artifact.parts)
    assert state, responses
    return state, answer, said


def only(agent_card: pb.AgentCard, version: str) -> pb.AgentCard:
    """The card with only the interface of one protocol version (0.3 makes the SDK client
    use its compat transport: `message/send`, `message/stream`)."""
    copy = pb.AgentCard()
    copy.CopyFrom(agent_card)
    keep = [i for i in copy.supported_interfaces if i.protocol_version == version]
    del copy.supported_interfaces[:]
    copy.supported_interfaces.extend(keep)
    return copy


def test_cards_describe_the_project_and_each_agent(served: tuple[str, Any]):
    url, _api = served
    project = card(url)
    assert project.name == "a2ademo" and project.description == "Arithmetic over A2A"
    assert [s.id for s in project.skills] == ["math"]
    assert project.supported_interfaces[0].url == f"{url}/a2a/math"  # the only agent
    assert project.capabilities.streaming
    math = card(url, "/a2a/math/.well-known/agent-card.json")
    assert math.name == "math" and math.description == "Does arithmetic with a calculator"
    assert list(math.skills[0].tags) == ["math"]  # a keyed server's cards name no tools
    assert {i.protocol_version for i in math.supported_interfaces} == {"1.0", "0.3"}
    assert httpx.get(f"{url}/.well-known/agent-card.json").status_code == 200  # no key needed
    missing = httpx.get(
        f"{url}/a2a/ghost/.well-known/agent-card.json", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert missing.status_code == 404 and "math" in missing.json()["error"]["hint"]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
@pytest.mark.parametrize("streaming", [False, True])
def test_send_and_stream_with_the_a2a_sdk_client(
    served: tuple[str, Any], version: str, streaming: bool
):
    url, _api = served
    agent = only(card(url, "/a2a/math/.well-known/agent-card.json"), version)
    responses = asyncio.run(asyncio.wait_for(exchange(agent, "6*7?", streaming=streaming), 30))
    state, text, _said = outcome(responses)
    assert state == pb.TaskState.TASK_STATE_COMPLETED
    assert text.startswith("The answer is 42.") and KEY not in text
    if streaming:
        updates = [r.status_update for r in responses if r.HasField("status_update")]
        events = [u.metadata["fim_event"] for u in updates if "fim_event" in u.metadata]
        assert "run_started" in events and "tool_call" in events and "tool_result" in events
        assert all(KEY not in str(r) for r in responses)


def test_a_context_is_a_session_of_the_key_that_started_it(served: tuple[str, Any]):
    url, api = served
    before = run_ids(url, KEY)
    agent = card(url, "/a2a/math/.well-known/agent-card.json")

    async def main() -> None:
        replies = await exchange(agent, "I am Ada", streaming=False, context_id="c-1")
        assert outcome(replies)[0] == pb.TaskState.TASK_STATE_COMPLETED
        task_id = next(r.task.id for r in replies if r.HasField("task"))
        mine = await get_task(agent, task_id, KEY)
        assert mine.status.state == pb.TaskState.TASK_STATE_COMPLETED
        with pytest.raises(TaskNotFoundError):  # tasks are the key's too
            await get_task(agent, task_id, OTHER_KEY)
        await exchange(agent, "Who am I?", streaming=False, context_id="c-1")
        alices = session_key(key_owner(KEY.encode()), "a2a:c-1")
        _owner, history = await api.session_store.load(alices)
        assert [m.content for m in history if m.role == "user"] == ["I am Ada", "Who am I?"]
        # bob's `c-1` is a context of his own: alice's turns never reach it, nor his hers
        other = await exchange(agent, "and me?", streaming=False, key=OTHER_KEY, context_id="c-1")
        state, _text, said = outcome(other)
        assert state == pb.TaskState.TASK_STATE_COMPLETED and "Ada" not in said
        assert len((await api.session_store.load(alices))[1]) == 4
        bobs = session_key(key_owner(OTHER_KEY.encode()), "a2a:c-1")
        assert next(m.content for m in (await api.session_store.load(bobs))[1]) == "and me?"

    asyncio.run(asyncio.wait_for(main(), 30))
    # the runs are alice's too: bob neither lists nor reads them (fim.store.owners)
    assert len(assert_only_owner_sees(url, KEY, OTHER_KEY, before)) == 2


def test_a_key_at_its_run_limit_gets_a_failed_task_and_other_keys_do_not(
    served: tuple[str, Any],
):
    """`server.key_limits` over A2A: the task fails with the limit's reason (a JSON-RPC
    client has no 429 to read), before the run starts."""
    from fim.config.schema import KeyLimits
    from fim.server.limits import KeyLimiter

    url, api = served
    agent = card(url, "/a2a/math/.well-known/agent-card.json")
    before, api.limits = api.limits, KeyLimiter(lambda: KeyLimits(max_parallel_runs=1))
    going = api.limits.take(key_owner(KEY.encode()))  # alice's one run, going
    try:
        refused = asyncio.run(asyncio.wait_for(exchange(agent, "6*7?", streaming=False), 30))
        state, _text, said = outcome(refused)
        assert state == pb.TaskState.TASK_STATE_FAILED and "max_parallel_runs" in said
        other = exchange(agent, "6*7?", streaming=True, key=OTHER_KEY)
        assert outcome(asyncio.run(asyncio.wait_for(other, 30)))[0] == (
            pb.TaskState.TASK_STATE_COMPLETED
        )
    finally:
        assert going is not None
        going.release()
        api.limits = before


def test_tasks_are_in_the_store_per_key_and_each_key_keeps_its_most_recent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The SDK's store kept every task in the memory of one process: memory grew with
    every message, and another replica (or a restarted server) did not know the task.
    Tasks are now in the state store: a second server on the same store reads them; each
    key keeps its `TASKS_PER_OWNER` most recent, and another key's tasks are not there
    (nor pushed out)."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.store import tasks

    monkeypatch.setattr(tasks, "TASKS_PER_OWNER", 2)
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        f'name: t\nstate: "sqlite:///.fim/state.db"\nserver: {{api_keys: [{KEY}, {OTHER_KEY}]}}\n'
    )
    (root / "agents" / "math.yaml").write_text("model: scripted:s.yaml\n")
    (root / "s.yaml").write_text('- text: "42"\n')

    async def task_of(agent: pb.AgentCard, key: str) -> str:
        replies = await exchange(agent, "6*7?", streaming=False, key=key)
        return next(r.task.id for r in replies if r.HasField("task"))

    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        agent = card(srv.url, "/a2a/math/.well-known/agent-card.json")
        bobs = asyncio.run(task_of(agent, OTHER_KEY))
        alices = [asyncio.run(task_of(agent, KEY)) for _ in range(3)]
    # the first server is gone; a new one on the same store answers for the tasks
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        agent = card(srv.url, "/a2a/math/.well-known/agent-card.json")

        async def main() -> None:
            with pytest.raises(TaskNotFoundError):  # alice's oldest, beyond her two
                await get_task(agent, alices[0], KEY)
            for kept in alices[1:]:
                found = await get_task(agent, kept, KEY)
                assert found.id == kept and found.status.state == pb.TaskState.TASK_STATE_COMPLETED
                assert "".join(p.text for a in found.artifacts for p in a.parts) == "42"
            with pytest.raises(TaskNotFoundError):  # bob's task is bob's
                await get_task(agent, bobs, KEY)
            assert (await get_task(agent, bobs, OTHER_KEY)).id == bobs

        asyncio.run(asyncio.wait_for(main(), 30))


def test_unknown_agent_and_missing_key(served: tuple[str, Any]):
    url, _api = served
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "role": "user",
                "parts": [{"kind": "text", "text": "hi"}],
                "messageId": "m1",
                "kind": "message",
            }
        },
    }
    assert httpx.post(f"{url}/a2a/math", json=body).status_code == 401
    ghost = httpx.post(
        f"{url}/a2a/ghost", json=body, headers={"Authorization": f"Bearer {KEY}"}
    ).json()
    assert ghost["result"]["status"]["state"] == "failed"
    assert "unknown agent 'ghost'" in str(ghost["result"]["status"])


def test_a_body_nested_past_the_cap_is_a_400_before_the_sdk_parses_it(
    served: tuple[str, Any], caplog: pytest.LogCaptureFixture
):
    """Every body meets the 64-level nesting cap; the SDK's own parse recursed on a deep
    one (a RecursionError, its traceback logged per request)."""
    url, _api = served
    for depth, code in ((100, -32600), (10_000, -32700)):  # past the cap; past any parser's
        deep = '{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": ' + (
            '{"a": ' * depth + "1" + "}" * depth + "}"
        )
        sent = httpx.post(
            f"{url}/a2a/math",
            content=deep,
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
        assert sent.status_code == 400
        problem = sent.json()["error"]
        assert problem["code"] == code, problem
        said = "nests deeper than 64 levels" if code == -32600 else "is not JSON"
        assert said in problem["message"]
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


def test_a_body_with_nan_is_a_400_before_the_sdk_reads_it(served: tuple[str, Any]):
    """JSON numbers only, as every body: NaN in a message's metadata is refused."""
    url, _api = served
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": '
        '{"role": "user", "parts": [{"text": "hi"}], "messageId": "m1", '
        '"metadata": {"amount": NaN}}}}'
    )
    sent = httpx.post(
        f"{url}/a2a/math",
        content=body,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    assert sent.status_code == 400
    assert "NaN or Infinity" in sent.json()["error"]["message"]
