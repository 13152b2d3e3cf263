"""A stopping `fim serve` (SIGTERM) cuts the streamed runs still going just before its
`--shutdown-timeout` ends, itself: each stream gets a last error event with the code
`server_shutting_down` in its endpoint's format (fim's `error` event on the native agent and
workflow streams; on `/v1/chat/completions` the error the `openai` SDK raises as an
`APIError` with that code), then ends as a response should; each run is recorded cancelled,
an agent run with the server's stop as the reason; the log has one line per cut run and no
traceback. uvicorn used to cut them: the stream just broke off, and it logged the
cancellation's traceback.

One `fim serve` process stops under three streams at once (its start is most of the time
spent). The model never answers, so every run is still going at the bound: no clock is read
or asserted."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest

from fim.build.compile import compile_project
from fim.run.services import Services
from fim.server.stopping import SERVER_STOPPED, StreamCut, cut_streams, until_stop
from fim.store import get_store
from fim.testing.cluster import until
from fim.testing.model_server import OpenAIStubServer
from fim.testing.server import fim_server

CUT = "server_shutting_down"


def _project(root: Path, stub_url: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "workflows").mkdir()
    (root / "fim.yaml").write_text("name: stopping\n")
    (root / "agents" / "slow.yaml").write_text(
        "description: never answered\n"
        f"model: {{model: openai/stub, api_base: '{stub_url}', api_key: x}}\n"
    )
    (root / "workflows" / "ask.yaml").write_text(
        "description: asks the agent that is never answered\n"
        "nodes:\n  ask: {type: agent, agent: slow, input: hi}\n"
        "outputs:\n  said: '{{ nodes.ask.output }}'\n"
    )
    return root


def _frames(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of each server-sent event of a fim stream."""
    frames = []
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            frames.append((fields.get("event", "message"), json.loads(fields["data"])))
    return frames


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What three clients streaming runs saw when the server stopped under them, the
    server's log and its run records."""
    root = tmp_path_factory.mktemp("stream") / "p"
    seen: dict[str, Any] = {}
    with OpenAIStubServer() as stub:
        stub.hang_next(3)
        _project(root, stub.base_url)
        flags = ("--shutdown-timeout", "2", "--log-level", "info")
        with fim_server(root, *flags) as (url, proc):

            def native() -> None:
                body = {"input": "hi", "stream": True}
                with httpx.stream("POST", f"{url}/v1/agents/slow/runs", json=body, timeout=60) as r:
                    seen["native"] = _frames(r.read())

            def workflow() -> None:
                with httpx.stream(
                    "POST", f"{url}/v1/workflows/ask/runs", json={"stream": True}, timeout=60
                ) as r:
                    seen["workflow"] = _frames(r.read())

            def chat() -> None:
                client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
                stream = client.chat.completions.create(
                    model="slow", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                try:
                    seen["chunks"] = [chunk for chunk in stream]
                except openai.APIError as exc:
                    seen["openai"] = exc

            callers = [threading.Thread(target=f) for f in (native, workflow, chat)]
            for caller in callers:
                caller.start()
            until(lambda: len(stub.requests) >= 3, what="three runs waiting on the model")
            proc.send_signal(signal.SIGTERM)
            for caller in callers:
                caller.join(timeout=60)
            seen["exit"] = proc.wait(timeout=60)
    seen["log"] = next(root.glob("serve-*.log")).read_text()

    async def records() -> dict[str, Any]:
        store = get_store(Services(root=root, state_url=compile_project(root).project.state))
        return {r.id: r for r in await store.list_runs(limit=10)}

    seen["records"] = asyncio.run(records())
    return seen


def test_fims_own_stream_ends_with_an_error_event_server_shutting_down(
    stopped: dict[str, Any],
) -> None:
    kinds = [kind for kind, _ in stopped["native"]]
    assert kinds[0] == "run_started" and kinds[-1] == "error"
    last = stopped["native"][-1][1]
    run_id = stopped["native"][0][1]["run_id"]
    assert last["kind"] == CUT and last["run_id"] == run_id
    assert f"the server is stopping and cut run {run_id}" in last["message"]
    assert stopped["exit"] == 0


def test_the_openai_sdk_raises_the_cut_as_an_api_error_with_its_code(
    stopped: dict[str, Any],
) -> None:
    assert "chunks" not in stopped  # not an answer that simply stopped
    error = stopped["openai"]
    assert isinstance(error, openai.APIError) and error.code == CUT
    assert "the server is stopping and cut run" in error.message


def test_a_streamed_workflow_run_ends_the_same_way(stopped: dict[str, Any]) -> None:
    kind, last = stopped["workflow"][-1]
    assert kind == "error" and last["kind"] == CUT


def test_the_log_has_one_line_per_cut_run_and_no_traceback(stopped: dict[str, Any]) -> None:
    log = stopped["log"]
    assert log.count("stopping: cut streamed run") == 3
    assert "Traceback" not in log
    assert "Cancel 1 running task" not in log  # uvicorn had nothing left to cut


def test_the_cut_runs_are_recorded_cancelled_by_the_servers_stop(
    stopped: dict[str, Any],
) -> None:
    records = stopped["records"]
    assert sorted(r.kind for r in records.values()) == ["agent", "agent", "workflow"]
    assert {r.status for r in records.values()} == {"cancelled"}
    native = records[stopped["native"][0][1]["run_id"]]
    assert native.data["error"] == SERVER_STOPPED
    assert all(r.data["error"] == SERVER_STOPPED for r in records.values() if r.kind == "agent")


# ------------------------------------------------------------------ the cut, in process


def _api() -> Any:
    return SimpleNamespace(services=Services())


def test_a_run_waiting_for_its_next_event_is_ended_and_the_stream_goes_on() -> None:
    ended: list[str] = []

    async def run() -> AsyncIterator[str]:
        try:
            yield "run_started"
            await asyncio.Event().wait()  # the model never answers
            yield "never"
        finally:
            ended.append("run")

    async def stream(api: Any) -> list[str]:
        got: list[str] = []
        try:
            async for event in until_stop(api, "r1", run()):
                got.append(event)
                asyncio.get_running_loop().call_soon(cut_streams, api)
        except StreamCut as cut:
            got.append(cut.event()["kind"])
        await asyncio.sleep(0)  # the stream's task was not left cancelled: it goes on
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0
        return got

    assert asyncio.run(stream(_api())) == ["run_started", CUT]
    assert ended == ["run"]


def test_a_run_cut_between_two_events_is_closed_before_the_next() -> None:
    ended: list[str] = []

    async def run() -> AsyncIterator[str]:
        try:
            for n in range(3):
                yield f"event {n}"
        finally:
            ended.append("run")

    async def stream(api: Any) -> list[str]:
        got: list[str] = []
        try:
            async for event in until_stop(api, "r2", run()):
                got.append(event)
                cut_streams(api)  # while the stream sends an event
        except StreamCut:
            got.append("cut")
        return got

    assert asyncio.run(stream(_api())) == ["event 0", "cut"]
    assert ended == ["run"]


def test_a_run_past_its_last_event_is_left_to_end() -> None:
    """Its answer is complete; only its record is being written: a cut then would send an
    error after the answer."""

    async def run() -> AsyncIterator[Any]:
        yield SimpleNamespace(type="run_finished", run_id="r3")
        await asyncio.sleep(0)  # its record being written when the cut comes

    async def stream(api: Any) -> list[str]:
        got: list[str] = []
        async for event in until_stop(api, "r3", run()):
            got.append(event.type)
            asyncio.get_running_loop().call_soon(cut_streams, api)
        return got

    assert asyncio.run(stream(_api())) == ["run_finished"]
