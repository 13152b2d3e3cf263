"""An A2A `tasks/cancel` stops the task's run whichever process of one PostgreSQL store
takes it (attack-63 F1).

On `fim serve --workers 2`, a cancel reaching the worker that did not run the task was
answered `canceled`, and stored so, while the run went on in the other worker waiting on
its approval: approved, it ran its guarded tool, and the task flipped to `completed`. Now
such a cancel asks the process running the task to stop it, through the store, and answers
once it did: the run is recorded `cancelled`, its approval expired (an approval after it is
refused) and its tool never runs; both processes read the task `canceled`. A task whose run
ended keeps its final state (a cancel of it is an error), and a resubscription taken by the
other process follows the task to its end. Two apps on one store stand for two workers
(tests/server/test_mcp_across_workers.py); the last test runs the real `fim serve
--workers 2`."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError

from fim.testing.server import ServerThread, wait_announced

KEY = "k-attack63-cancel"
CANCELED = pb.TaskState.TASK_STATE_CANCELED
WAITING = pb.TaskState.TASK_STATE_INPUT_REQUIRED
TOOL = '''\
from pathlib import Path


def danger(path: str) -> str:
    """Writes a file: the call a human must approve."""
    Path(path).write_text("ran")
    return "done"
'''


def write_project(root: Path, state: str) -> Path:
    marker = root / "ran.txt"
    script = f'- tool_calls: [{{name: danger, arguments: {{path: "{marker}"}}}}]\n- text: "ok"\n'
    files = {
        "fim.yaml": f'name: a2acancel\nstate: "{state}"\nserver: {{api_keys: [{KEY}]}}\n',
        "hooks/mytools.py": TOOL,
        "danger.yaml": script,
        "pong.yaml": '- text: "pong"\n',
        "agents/careful.yaml": (
            "model: scripted:danger.yaml\ntools: ['mytools:danger']\n"
            "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 120}\n"
        ),
        "agents/quick.yaml": "model: scripted:pong.yaml\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def workers(
    tmp_path_factory: pytest.TempPathFactory, pg_database: Any
) -> Iterator[tuple[Path, str, str]]:
    """The project and the URLs of two servers on one PostgreSQL store."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.capabilities import CAPABILITIES
    from fim.run.services import Services
    from fim.server.app import create_app

    root = tmp_path_factory.mktemp("a2acancel")
    write_project(root, pg_database("").owner_url)
    state = (root / "fim.yaml").read_text().split('state: "')[1].split('"')[0]

    def app() -> Any:
        services = Services(root=root, state_url=state, providers=CAPABILITIES)
        made = create_app(SnapshotHolder(compile_project(root)), services)
        made.state.api.one_of_many = True  # what `fim serve --workers N` sets
        return made

    with ServerThread(app()) as one, ServerThread(app()) as two:
        yield root, one.url, two.url


def client(url: str, agent: str) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    card = pb.AgentCard(
        name=agent,
        supported_interfaces=[
            pb.AgentInterface(
                url=f"{url}/a2a/{agent}", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=True),
    )
    return ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)


def message(text: str) -> pb.SendMessageRequest:
    parts = [pb.Part(text=text)]
    return pb.SendMessageRequest(
        message=pb.Message(role=pb.Role.ROLE_USER, parts=parts, message_id=uuid.uuid4().hex)
    )


def state_of(response: Any) -> int:
    if response.HasField("task"):
        return int(response.task.status.state)
    if response.HasField("status_update"):
        return int(response.status_update.status.state)
    return 0


async def waiting_task(url: str, seen: list[Any], held: asyncio.Event) -> None:
    """Stream a message to `careful` on `url`, which waits on its approval (`held`)."""
    c = client(url, "careful")
    try:
        async for response in c.send_message(message("go")):
            seen.append(response)
            if state_of(response) == WAITING:
                held.set()
    finally:
        await c.close()


def task_id_of(seen: list[Any]) -> str:
    return next(r.task.id if r.HasField("task") else r.status_update.task_id for r in seen)


def test_a_cancel_taken_by_the_other_worker_stops_the_run_and_its_tool_never_runs(
    workers: tuple[Path, str, str],
) -> None:
    root, one, two = workers

    async def main() -> None:
        seen: list[Any] = []
        held = asyncio.Event()
        stream = asyncio.create_task(waiting_task(one, seen, held))
        await asyncio.wait_for(held.wait(), 60)
        task_id = task_id_of(seen)
        followed: list[Any] = []

        async def follow() -> None:  # a resubscription taken by the other worker
            c = client(two, "careful")
            try:
                async for event in c.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
                    followed.append(event)
            finally:
                await c.close()

        following = asyncio.create_task(follow())
        while not followed:
            await asyncio.sleep(0.05)

        other = client(two, "careful")
        try:
            answered = await other.cancel_task(pb.CancelTaskRequest(id=task_id))
        finally:
            await other.close()
        assert answered.status.state == CANCELED

        await asyncio.wait_for(stream, 30)  # the run stopped: its stream ended
        await asyncio.wait_for(following, 30)
        assert state_of(seen[-1]) == CANCELED, seen[-1]
        assert state_of(followed[0]) == WAITING and state_of(followed[-1]) == CANCELED

        for url in (one, two):
            c = client(url, "careful")
            try:
                got = await c.get_task(pb.GetTaskRequest(id=task_id))
            finally:
                await c.close()
            assert got.status.state == CANCELED, url
        run_id = got.metadata.fields["run_id"].string_value

        auth = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(headers=auth, timeout=30) as http:
            record = (await http.get(f"{two}/v1/runs/{run_id}")).json()
            assert record["status"] == "cancelled", record
            listed = await http.get(f"{two}/v1/approvals", params={"status": "all"})
            (approval,) = [a for a in listed.json()["approvals"] if a["run_id"] == run_id]
            assert approval["status"] == "expired", approval
            decided = await http.post(
                f"{two}/v1/approvals/{approval['id']}", json={"decision": "approve"}
            )
            assert decided.status_code == 409, decided.text
        await asyncio.sleep(0.5)
        assert not (root / "ran.txt").exists()  # the guarded tool never ran

    asyncio.run(main())


def test_a_task_whose_run_ended_keeps_its_state_and_its_cancel_is_an_error(
    workers: tuple[Path, str, str],
) -> None:
    _, one, two = workers

    async def main() -> None:
        c = client(one, "quick")
        try:
            done = [r async for r in c.send_message(message("hi"))]
        finally:
            await c.close()
        task_id = task_id_of(done)
        other = client(two, "quick")
        try:
            with pytest.raises(TaskNotCancelableError):
                await other.cancel_task(pb.CancelTaskRequest(id=task_id))
            got = await other.get_task(pb.GetTaskRequest(id=task_id))
        finally:
            await other.close()
        assert got.status.state == pb.TaskState.TASK_STATE_COMPLETED

    asyncio.run(main())


def test_on_fim_serve_with_two_workers_every_cancel_stops_its_run(
    tmp_path: Path, pg_database: Any
) -> None:
    """Each cancel goes over a fresh connection, which the kernel hands to either worker:
    over several tasks both the worker running the task and the other one answer some."""
    root = write_project(tmp_path / "p", pg_database("").owner_url)
    args = ["serve", "-p", str(root), "--port", "0", "--workers", "2", "--log-level", "warning"]
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "fim.cli", *args], stdout=log, stderr=log)
    try:
        port = wait_announced(proc, tmp_path / "serve.log", time.monotonic() + 60)
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 60
        pids: set[int] = set()
        while len(pids) < 2:  # both workers up, each on a fresh connection
            try:
                status = httpx.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {KEY}"})
                pids.add(status.json()["pid"])
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < end, (
                tmp_path / "serve.log"
            ).read_text()
            time.sleep(0.02)

        async def trial() -> None:
            seen: list[Any] = []
            held = asyncio.Event()
            stream = asyncio.create_task(waiting_task(url, seen, held))
            await asyncio.wait_for(held.wait(), 60)
            c = client(url, "careful")  # a connection of its own
            try:
                answered = await c.cancel_task(pb.CancelTaskRequest(id=task_id_of(seen)))
            finally:
                await c.close()
            assert answered.status.state == CANCELED
            await asyncio.wait_for(stream, 30)
            assert state_of(seen[-1]) == CANCELED

        for _ in range(4):
            asyncio.run(trial())
        time.sleep(0.5)
        assert not (root / "ran.txt").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
