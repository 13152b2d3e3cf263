"""The live event tail across replicas (issue 24.1): a run started on replica A is read,
while it is still going, from replica B's `GET /v1/runs/{id}/events` — every event, in
order, and the end. The model holds its second reply until B has seen the first tool
result, so B is provably tailing a run in progress (woken by PostgreSQL NOTIFY), not
reading a finished one. Also: the same stream resumes after `Last-Event-ID`, and on SQLite
(one process) the tail works the same way."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.testing.cluster import sse_frames
from fim.testing.model_server import OpenAIStubServer, completion
from fim.testing.server import serve_process

AGENT = """description: Adds, slowly
model: {{model: openai/stub, api_base: '{base}', api_key: x, max_retries: 0}}
instructions: Use the calculator.
tools: [calculator]
"""


def held_model(release: threading.Event) -> Callable[[dict[str, Any]], Any]:
    """A calculator call first; the answer only once `release` is set."""

    def handler(request: dict[str, Any]) -> Any:
        if not any(m.get("role") == "tool" for m in request["messages"]):
            return completion(None, [("c1", "calculator", '{"expression": "2+3"}')], "stub")
        release.wait(20)
        return "five"

    return handler


def project(root: Path, state: str, base: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: live\nstate: "{state}"\n')
    (root / "agents" / "adder.yaml").write_text(AGENT.format(base=base))
    return root


def test_replica_b_tails_a_run_going_on_replica_a(tmp_path: Path, pg_database) -> None:
    db = pg_database("")
    release = threading.Event()
    with ExitStack() as stack:
        model = stack.enter_context(OpenAIStubServer(handler=held_model(release)))
        root = project(tmp_path / "p", db.owner_url, model.base_url)
        a, b = (stack.enter_context(serve_process(root)) for _ in range(2))
        body = {"input": "2+3?", "stream": True}
        on_a: list[dict[str, Any]] = []
        with httpx.stream("POST", f"{a}/v1/agents/adder/runs", json=body, timeout=30) as resp:
            events = sse_frames(resp.iter_lines())
            _, first = next(events)
            on_a.append(first)
            run_id = first["run_id"]
            running = httpx.get(f"{b}/v1/runs/{run_id}").json()
            assert running["status"] == "running" and running["kind"] == "agent"

            on_b: list[tuple[int, dict[str, Any]]] = []
            with httpx.stream("GET", f"{b}/v1/runs/{run_id}/events", timeout=30) as tail:
                for seq, event in sse_frames(tail.iter_lines()):
                    on_b.append((seq, event))
                    if event["type"] == "tool_result":
                        assert not release.is_set()  # the run cannot have finished yet
                        release.set()
            on_a += [event for _, event in events]

        assert [e["type"] for _, e in on_b] == [e["type"] for e in on_a]
        assert [e for _, e in on_b] == on_a  # the same events, in order, with the end
        assert on_b[-1][1]["type"] == "run_finished" and on_b[-1][1]["output"] == "five"
        assert [s for s, _ in on_b] == list(range(1, len(on_b) + 1))

        # a client that lost its replica resumes from the last id it saw, nothing twice
        resumed = httpx.get(f"{a}/v1/runs/{run_id}/events", headers={"Last-Event-ID": "2"})
        assert [e for _, e in sse_frames(iter(resumed.text.splitlines()))] == on_a[2:]
        record = httpx.get(f"{b}/v1/runs/{run_id}").json()
        assert record["status"] == "ok"
        assert httpx.get(f"{b}/v1/runs/nope/events").status_code == 404
        assert httpx.get(f"{b}/v1/runs/{run_id}/events?after=x").status_code == 400


@pytest.mark.asyncio
async def test_on_sqlite_the_tail_follows_a_run_in_the_same_process(tmp_path: Path) -> None:
    """No NOTIFY in SQLite: the writer wakes the tails of its own process."""
    import asyncio

    from fim.store import Store
    from fim.store.live import EventLog, read_events, running_here, tail

    store = Store("sqlite:///state.db", tmp_path)
    log = EventLog(store, "r1", "agent", "adder")
    seen: list[int] = []

    async def read() -> None:
        async for seq, _event in tail(store, "r1"):
            seen.append(seq)

    log.add({"type": "run_started", "run_id": "r1"})
    await log.flush()
    assert running_here(store, "r1") and await store.get_run("r1") is None  # memory only
    reader = asyncio.create_task(read())
    while not seen:
        await asyncio.sleep(0.01)
    log.add({"type": "llm_call", "run_id": "r1"})
    log.add({"type": "run_finished", "run_id": "r1", "output": "x"})
    await asyncio.wait_for(reader, 10)
    assert seen == [1, 2, 3]
    await log.close()  # the whole log in one write, then read from the table
    assert not running_here(store, "r1")
    await store.put_run("r1", "agent", "adder", "ok", {})  # as fim serve does after close()
    assert [seq for seq, _ in await read_events(store, "r1")] == [1, 2, 3]
    assert [seq async for seq, _ in tail(store, "r1", after=1)] == [2, 3]
    assert await read_events(store, "r1", after=2**63 - 1) == []  # the largest id there is
    store.close()


def test_an_event_id_no_stored_event_can_have_is_a_400_before_the_stream_starts(
    tmp_path: Path,
) -> None:
    """Else the query fails after the 200 was sent: the client sees a cut stream, the
    server logs a traceback."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text('name: live\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "agents" / "quick.yaml").write_text("model: scripted:quick.script.yaml\n")
    (tmp_path / "quick.script.yaml").write_text('- text: "hi"\n')
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        run = httpx.post(f"{srv.url}/v1/agents/quick/runs", json={"input": "x"}).json()
        events = f"{srv.url}/v1/runs/{run['run_id']}/events"
        for sent in (
            {"headers": {"Last-Event-ID": "9" * 23}},  # past the store's 64-bit ids
            {"params": {"after": str(2**63)}},
            {"params": {"after": "-1"}},
            {"params": {"after": "\u00b2"}},  # a digit to str.isdigit(), not to int()
            {"params": {"after": "9" * 5000}},  # past int()'s 4300 digits
        ):
            refused = httpx.get(events, **sent)
            assert refused.status_code == 400, (sent, refused.text)
            assert refused.json()["error"]["param"] == "after"
        replayed = httpx.get(events, params={"after": "0"})
        assert replayed.status_code == 200 and "event: run_finished" in replayed.text
