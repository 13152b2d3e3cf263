"""Background runs (`"background": true`): 202 with the run id and a Location at once, the
run itself later — in the server's process with SQLite, on a `fim worker` through
procrastinate with PostgreSQL — and its record, events and answer in `GET /v1/runs/{id}`.
A queued workflow paused at a human node holds no worker: the approval, given over HTTP,
queues the job that a worker picks up to finish the run."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.server.app import create_app
from fim.testing.cluster import until
from fim.testing.server import ServerThread, fim_process
from fim.testing.workflows import HUMAN_REFUND

AGENT = "description: d\nmodel: scripted:math.yaml\ntools: [calculator]\ninstructions: Add.\n"
SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: "The answer is 42."
"""


def project(root: Path, state: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "workflows").mkdir()
    (root / "fim.yaml").write_text(f'name: bg\nstate: "{state}"\n')
    (root / "math.yaml").write_text(SCRIPT)
    (root / "agents" / "math.yaml").write_text(AGENT)
    (root / "workflows" / "refund.yaml").write_text(HUMAN_REFUND)
    return root


@contextmanager
def served(root: Path) -> Iterator[str]:
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        yield srv.url


@contextmanager
def workers(root: Path, count: int = 1, *extra: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`fim worker` processes on the project (their logs next to it)."""
    args = ["worker", "-p", str(root), "--heartbeat", "0.5", "--stalled-after", "30", *extra]
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                fim_process(*args, log=root.parent / f"worker{i}.log", env={**os.environ, **ENV})
            )
            for i in range(count)
        ]


ENV: dict[str, str] = {}


def finished(url: str, run_id: str, status: str = "ok") -> dict:
    def check() -> dict | None:
        record = httpx.get(f"{url}/v1/runs/{run_id}").json()
        return record if record.get("status") == status else None

    return until(check)  # type: ignore[return-value]


def streamed(url: str, run_id: str) -> list[str]:
    """The event types `GET /v1/runs/{id}/events` sends for a run."""
    text = httpx.get(f"{url}/v1/runs/{run_id}/events", timeout=30).text
    return [line[7:] for line in text.splitlines() if line.startswith("event: ")]


def test_background_runs_execute_in_the_server_with_sqlite(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    with served(root) as url:
        answer = httpx.post(
            f"{url}/v1/agents/math/runs", json={"input": "6*7?", "background": True}
        )
        assert answer.status_code == 202
        run_id = answer.json()["run_id"]
        assert answer.headers["location"] == f"/v1/runs/{run_id}"
        assert answer.json()["executes"] == "server"
        record = finished(url, run_id)
        assert record["kind"] == "agent" and record["data"]["output"] == "The answer is 42."
        types = [e["type"] for e in record["data"]["events"]]
        assert "tool_call" in types and types[-1] == "run_finished"
        assert streamed(url, run_id) == types  # its event log, followed while it runs

        flow = httpx.post(
            f"{url}/v1/workflows/refund/runs", json={"inputs": {"amount": 5}, "background": True}
        )
        assert flow.status_code == 202
        paused = finished(url, flow.json()["run_id"], "paused")
        assert paused["data"]["nodes"]["approve"]["status"] == "waiting"

        bad = httpx.post(
            f"{url}/v1/workflows/refund/runs", json={"inputs": {"amount": "x"}, "background": True}
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "inputs.amount"
        both = httpx.post(
            f"{url}/v1/agents/math/runs", json={"input": "x", "stream": True, "background": True}
        )
        assert both.status_code == 400 and "exclude" in both.json()["error"]["message"]
        doc = httpx.get(f"{url}/openapi.json").json()
        post = doc["paths"]["/v1/agents/{name}/runs"]["post"]
        assert "Location" in post["responses"]["202"]["headers"]
        assert "background" in doc["components"]["schemas"]["RunBody"]["properties"]


def test_background_runs_execute_on_a_worker_and_approvals_resume_there(
    tmp_path: Path, pg_database
):
    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    with served(root) as url, workers(root):
        answer = httpx.post(
            f"{url}/v1/agents/math/runs", json={"input": "6*7?", "background": True}
        )
        assert answer.status_code == 202 and answer.json()["executes"] == "worker"
        flow = httpx.post(
            f"{url}/v1/workflows/refund/runs", json={"inputs": {"amount": 5}, "background": True}
        )
        assert flow.status_code == 202
        record = finished(url, answer.json()["run_id"])
        assert record["data"]["output"] == "The answer is 42."
        assert record["data"]["executor"] == "worker"
        # the worker's event log, streamed by the server (another process)
        types = [e["type"] for e in record["data"]["events"]]
        assert streamed(url, answer.json()["run_id"]) == types
        run_id = flow.json()["run_id"]
        paused = finished(url, run_id, "paused")
        assert paused["data"]["queued"] is True
        approval = httpx.get(f"{url}/v1/approvals").json()["approvals"][0]
        assert approval["data"]["run_id"] == run_id
        # the job that paused the run has ended: the worker holds nothing for it
        decided = httpx.post(f"{url}/v1/approvals/{approval['id']}", json={"decision": "approve"})
        assert decided.json()["resumed_run"] == run_id
        done = finished(url, run_id)
        assert done["data"]["outputs"] == {"refunded": "-5"}
        owners = {n: s.get("status") for n, s in done["data"]["nodes"].items()}
        assert owners == {"approve": "ok", "refund": "ok"}


def test_a_queued_run_is_recovered_only_by_a_worker_job(tmp_path: Path):
    """fim's own host/pid recovery is off for runs `fim worker` executes: procrastinate's
    re-delivery is the only path that recovers them (docs/scale-out.md)."""
    import asyncio

    import pytest

    from fim.errors import RunError
    from fim.run.services import Services
    from fim.store import get_store
    from fim.workflows.engine import WorkflowEngine
    from fim.workflows.state import KIND, NodeState, RunState, orphaned

    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    snapshot = compile_project(root)
    decl = snapshot.workflows["refund"].model_dump(mode="json", by_alias=True, exclude_none=True)
    dead = {"host": __import__("socket").gethostname(), "pid": 2**22 + 7}  # no such process
    state = RunState(
        run_id="q1",
        workflow="refund",
        decl=decl,
        inputs={"amount": 1},
        nodes={"approve": NodeState(type="human"), "refund": NodeState(type="tool")},
        owner=dead,
        queued=True,
    )
    assert not orphaned(state) and orphaned(RunState(**{**vars(state), "queued": False}))

    async def go() -> None:
        services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
        try:
            await get_store(services).put_run("q1", KIND, "refund", "running", state.to_dict())
            engine = WorkflowEngine(snapshot, "refund", services)
            with pytest.raises(RunError, match="executed by `fim worker` jobs"):
                async for _ in engine.resume("q1", None, force=True):
                    pass
        finally:
            await services.aclose()

    asyncio.run(go())


async def test_a_restarted_background_run_says_so_between_its_attempts_in_the_log(tmp_path: Path):
    """A worker killed mid-run: procrastinate delivers the job again and the run starts over
    from its request. The log keeps what a reader may already have seen, then says the run
    restarted (attempt 2), then the new attempt's events from `run_started`; the record
    holds the attempt that finished."""
    from fim.events import LLMCall, RunStarted
    from fim.run.queued import KIND, execute_agent_run, mark_queued, request_data
    from fim.run.services import Services
    from fim.store import get_store
    from fim.store.live import EventLog, read_events, tail
    from fim.types import Message

    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    store = get_store(services)
    request = request_data([Message(role="user", content="6*7?")], None, "", snapshot)
    try:
        await mark_queued(services, "bg1", KIND, "math", request)
        # the first attempt: started, one model call logged, then its worker was killed
        await store.put_run("bg1", KIND, "math", "running", {"background": True, "attempt": 1})
        first = EventLog(store, "bg1", KIND, "math", record=False)
        first.add(RunStarted(run_id="bg1", agent="math", input="6*7?").model_dump(mode="json"))
        first.add(LLMCall(run_id="bg1", model="m", iteration=1).model_dump(mode="json"))
        await first.close()

        assert await execute_agent_run(snapshot, services, "bg1", "math", request) == "ok"

        logged = [event for _, event in await read_events(store, "bg1")]
        types = [event["type"] for event in logged]
        assert types[:4] == ["run_started", "llm_call", "run_restarted", "run_started"]
        assert logged[2]["attempt"] == 2 and types[-1] == "run_finished"
        # a reader that had the first attempt's two events learns of the restart first
        resumed = [event["type"] async for _, event in tail(store, "bg1", after=2)]
        assert resumed == types[2:]
        record = await store.get_run("bg1")
        assert record is not None and record.status == "ok" and record.data["attempt"] == 2
        assert [e["type"] for e in record.data["events"]] == types[2:]
    finally:
        await services.aclose()
