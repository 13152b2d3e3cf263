"""An A2A task costs the state store a few writes of a bounded size, however long its run.

Each run event was a `working` status *message*: the SDK moves every status message into
the task's history, and the task was saved whole at each update, so a run of N events
wrote O(N^2) bytes (3,234 events: a 3.2 MB task of 3,234 history messages, rewritten 3,234
times, 5 GB). A run's progress is now status metadata (streamed to `message/stream`
clients as before), a save that changes only that is not written, and a stored task is cut
to `HISTORY_KEPT` messages and `TASK_MAX_BYTES`. Driven by the a2a-sdk client against a
real uvicorn, as tests/server/test_a2a_serve.py; the store's writes are counted, never timed.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError

from fim.store import tasks
from fim.testing.server import ServerThread
from tests.server.test_a2a_serve import KEY, OTHER_KEY, card, exchange, get_task, outcome, request

CALLS = 4  # calculator calls a turn
SHORT, LONG = 1, 12  # turns of them
WORDY = "forty-two." * 2000  # 20,000 characters


def turns(n: int, answer: str = "done") -> str:
    call = '{name: calculator, arguments: {expression: "6*7"}}'
    turn = f"- tool_calls: [{', '.join([call] * CALLS)}]\n"
    return turn * n + f'- text: "{answer}"\n'


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    root = tmp_path_factory.mktemp("a2agrowth")
    files = {
        "fim.yaml": (
            'name: growth\nstate: "sqlite:///.fim/state.db"\n'
            f"server: {{api_keys: [{KEY}, {OTHER_KEY}]}}\n"
        ),
        "agents/short.yaml": "model: scripted:short.yaml\ntools: [calculator]\n",
        "short.yaml": turns(SHORT),
        "agents/long.yaml": "model: scripted:long.yaml\ntools: [calculator]\n",
        "long.yaml": turns(LONG),
        "agents/wordy.yaml": "model: scripted:wordy.yaml\n",
        "wordy.yaml": turns(0, WORDY),
        "agents/careful.yaml": (
            "model: scripted:careful.yaml\ntools: [calculator]\n"
            "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 120}\n"
        ),
        "careful.yaml": (
            '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "42"\n'
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with ServerThread(create_app(SnapshotHolder(compile_project(Path(root))))) as srv:
        yield srv.url


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[bytes]]:
    """Every task the A2A store writes, by task id: the protobuf bytes of each write."""
    written: dict[str, list[bytes]] = {}
    save = tasks.Tasks.save

    async def counted(self: tasks.Tasks, owner: str, task_id: str, task: dict[str, Any]) -> None:
        written.setdefault(task_id, []).append(base64.b64decode(task["pb"]))
        await save(self, owner, task_id, task)

    monkeypatch.setattr(tasks.Tasks, "save", counted)
    return written


def agent(url: str, name: str) -> pb.AgentCard:
    return card(url, f"/a2a/{name}/.well-known/agent-card.json")


def task_id(responses: list[Any]) -> str:
    return next(r.task.id for r in responses if r.HasField("task"))


def progress(responses: list[Any]) -> list[str]:
    """The run events a stream carried, in order (each a `working` update's metadata)."""
    updates = [r.status_update for r in responses if r.HasField("status_update")]
    return [u.metadata["fim_event"] for u in updates if "fim_event" in u.metadata]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_task_is_written_a_few_times_whatever_the_length_of_its_run(
    served: str, writes: dict[str, list[bytes]], streaming: bool
):
    """Twelve times the run events, the same writes of the same size: a task's store cost
    does not grow with its run (it grew with the square of it)."""

    async def main() -> dict[str, list[Any]]:
        return {
            name: await exchange(agent(served, name), "go", streaming=streaming)
            for name in ("short", "long")
        }

    replies = asyncio.run(asyncio.wait_for(main(), 60))
    short, long = (writes[task_id(replies[name])] for name in ("short", "long"))
    assert len(long) == len(short) <= 5  # submitted, working, the answer, completed
    assert sum(map(len, long)) <= sum(map(len, short)) + 64  # a few digits of usage
    for name, turns_run in (("short", SHORT), ("long", LONG)):
        state, answer, _said = outcome(replies[name])
        assert state == pb.TaskState.TASK_STATE_COMPLETED and answer == "done"
        if streaming:  # every event still reaches the client, in order
            events = progress(replies[name])
            assert events.count("tool_call") == events.count("tool_result") == CALLS * turns_run
            assert events[0] == "run_started" and events[-1] == "run_finished"


def test_a_stored_task_is_the_turn_the_answer_and_the_runs_end(
    served: str, writes: dict[str, list[bytes]]
):
    """`tasks/get` of a long run's task: its history is the client's turn (not one message
    per event), its artifact the answer, its metadata the run's end."""

    async def main() -> pb.Task:
        long = agent(served, "long")
        replies = await exchange(long, "go", streaming=True)
        found = await get_task(long, task_id(replies), KEY)
        with pytest.raises(TaskNotFoundError):  # still the key's alone
            await get_task(long, found.id, OTHER_KEY)
        return found

    found = asyncio.run(asyncio.wait_for(main(), 60))
    assert found.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert [m.role for m in found.history] == [pb.Role.ROLE_USER]
    assert [p.text for m in found.history for p in m.parts] == ["go"]
    assert [(a.name, [p.text for p in a.parts]) for a in found.artifacts] == [("answer", ["done"])]
    assert found.metadata["fim_event"] == "run_finished"
    assert '"iterations": 13' in found.metadata["fim_event_json"]
    assert found.metadata["run_id"] == found.artifacts[0].metadata["run_id"]
    assert pb.Task.FromString(writes[found.id][-1]) == found  # what was written is read


def test_a_stored_task_is_cut_to_its_cap_and_the_reply_is_whole(
    served: str, writes: dict[str, list[bytes]], monkeypatch: pytest.MonkeyPatch
):
    """An answer larger than a stored task's cap: the client of `message/send` gets it
    whole, a later `tasks/get` its head and a note of the cut; no write is over the cap."""
    monkeypatch.setattr(tasks, "TASK_MAX_BYTES", 4096)
    wordy = agent(served, "wordy")

    async def main() -> tuple[list[Any], pb.Task]:
        replies = await exchange(wordy, "talk", streaming=False)
        return replies, await get_task(wordy, task_id(replies), KEY)

    replies, found = asyncio.run(asyncio.wait_for(main(), 60))
    assert outcome(replies)[1] == WORDY
    assert all(len(w) <= 4096 for w in writes[found.id])
    assert found.status.state == pb.TaskState.TASK_STATE_COMPLETED and found.ByteSize() <= 4096
    (stored,) = [p.text for a in found.artifacts for p in a.parts]
    assert stored.startswith("forty-two.forty-two.")
    assert stored.endswith("[cut: a stored A2A task is at most 4096 bytes; its run keeps it whole]")


def test_a_running_task_reads_back_working_and_can_be_resubscribed(
    served: str, writes: dict[str, list[bytes]]
):
    """While a run waits for its approval its stored task is `input-required` (newcomer-54
    #9), though its progress updates are not written; a second stream
    (`tasks/resubscribe`) gets the task as the server holds it, then every event after, to
    the end."""

    async def main() -> tuple[list[Any], list[Any], pb.Task]:
        careful = agent(served, "careful")
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(careful)
        first: list[Any] = []
        second: list[Any] = []

        async def send() -> None:
            async for r in client.send_message(request("6*7?")):
                first.append(r)

        async def follow(task: str) -> None:
            async for r in client.subscribe(pb.SubscribeToTaskRequest(id=task)):
                second.append(r)

        async def pending() -> list[dict[str, Any]]:
            answer = await http.get(f"{served}/v1/approvals")
            return list(answer.json()["approvals"])

        sending = asyncio.create_task(send())
        try:
            while not first or not (waiting := await pending()):
                await asyncio.sleep(0.05)
            running = await client.get_task(pb.GetTaskRequest(id=task_id(first)))
            following = asyncio.create_task(follow(running.id))
            while not second:  # resubscribed: what follows reaches it
                await asyncio.sleep(0.05)
            decided = await http.post(
                f"{served}/v1/approvals/{waiting[0]['id']}", json={"decision": "approve"}
            )
            assert decided.status_code == 200, decided.text
            await following
            await sending
            return first, second, running
        finally:
            sending.cancel()
            await client.close()
            await http.aclose()

    first, second, running = asyncio.run(asyncio.wait_for(main(), 60))
    assert running.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
    assert len(running.history) == 1 and not running.artifacts
    assert second[0].HasField("task") and second[0].task.id == running.id
    assert second[0].task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
    assert len(writes[running.id]) <= 6  # and input-required, then working again
    for stream in (first, second):
        state, answer, _said = outcome(stream)
        assert state == pb.TaskState.TASK_STATE_COMPLETED and answer == "42"
        assert "tool_result" in progress(stream) and progress(stream)[-1] == "run_finished"


def message(n: int, text: str = "x") -> pb.Message:
    return pb.Message(message_id=f"m{n}", role=pb.Role.ROLE_AGENT, parts=[pb.Part(text=text)])


def test_a_stored_history_is_the_first_turn_and_the_newest_messages():
    from fim.server.a2a_tasks import HISTORY_KEPT, fitted

    task = pb.Task(id="t", history=[message(n) for n in range(100)])
    kept = fitted(task, 1 << 20)
    assert len(kept.history) == HISTORY_KEPT
    assert [m.message_id for m in kept.history] == ["m0", *(f"m{n}" for n in range(85, 100))]
    assert len(task.history) == 100  # the SDK's task, which it streams, is left alone
    small = pb.Task(id="t", history=[message(n) for n in range(3)])
    assert fitted(small, 1 << 20) is small  # a task that fits is stored as it is


def test_a_task_over_its_cap_loses_its_largest_parts_first():
    from fim.server.a2a_tasks import fitted

    task = pb.Task(
        id="t",
        history=[message(0, "the question")],
        artifacts=[pb.Artifact(artifact_id="a", parts=[pb.Part(raw=b"\0" * 10_000)])],
    )
    task.status.message.CopyFrom(message(1, "y" * 3000))
    kept = fitted(task, 2048)
    assert kept.ByteSize() <= 2048
    assert kept.history[0].parts[0].text == "the question"  # small: kept whole
    assert kept.artifacts[0].parts[0].text.startswith("[a part of 10003 bytes, not kept")
    assert kept.status.message.parts[0].text.startswith("yyy")
    assert kept.status.message.parts[0].text.endswith("its run keeps it whole]")


def test_a_task_whose_metadata_alone_is_over_its_cap_keeps_its_state_and_run():
    from fim.server.a2a_tasks import fitted

    task = pb.Task(id="t", context_id="c", history=[message(0)])
    task.status.state = pb.TaskState.TASK_STATE_COMPLETED
    task.history[0].metadata["sent"] = "z" * 5000  # a client's, not a part
    task.metadata["run_id"] = "r1"
    kept = fitted(task, 2048)
    assert (kept.id, kept.context_id, kept.status.state) == ("t", "c", task.status.state)
    assert kept.metadata["run_id"] == "r1" and not kept.history
    assert "larger than 2048 bytes" in kept.status.message.parts[0].text
