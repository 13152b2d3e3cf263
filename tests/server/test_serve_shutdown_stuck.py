"""The stopping server's cut reaches every streamed run before uvicorn's bound (attack-47 F4).

- A stream whose client stopped reading (a stalled proxy: the socket is full) sits in
  `send`, not between two events, and the cut used to pass it by: its run went on,
  uvicorn cancelled it at the bound with an "Exception in ASGI application" traceback,
  and the server exited seconds past its bound. Its send is now abandoned a moment after
  the cut: the run is closed (in the stream's own task), one line says so, and the
  response ends without its last event, which nobody would read.
- A2A `message/stream` was not cut at all: sse_starlette ended it at SIGTERM with no final
  event while its run went on with nobody reading. It now lives until the cut, and its
  task fails with the cut's message and `server_shutting_down` event.
- A follower of a run (`GET /v1/runs/{id}/events`) ends as a response should.

The stuck stream and the follower are driven here through ASGI with a `send` that never
returns (a full socket) and no clock; A2A is one `fim serve` process stopped under one
stream whose model never answers."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fim.run.services import Services
from fim.server.stopping import _QUIET, CUT, cut_streams, until_stop
from fim.server.streams import followed, sse
from fim.testing.cluster import until
from fim.testing.model_server import OpenAIStubServer
from fim.testing.server import fim_server


def _api() -> Any:
    return SimpleNamespace(services=Services())


class Client:
    """The ASGI side of one connection: `send` takes the response start and the first
    `room` body chunks, then never returns (the client stopped reading); `receive` never
    says the client left."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.sent: list[dict[str, Any]] = []
        self.stuck = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and self.room == 0:
            self.stuck.set()
            await asyncio.Event().wait()  # the socket is full
        self.room -= message["type"] == "http.response.body"
        self.sent.append(message)

    async def receive(self) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] != "http.response.start")


SCOPE = {"type": "http", "method": "POST", "asgi": {"spec_version": "2.3"}}
"""uvicorn's: Starlette streams in a task of its own next to the disconnect listener."""


async def _settled(task: asyncio.Future[Any], turns: int = 200) -> bool:
    for _ in range(turns):
        if task.done():
            return True
        await asyncio.sleep(0)
    return task.done()


def test_a_stream_whose_client_stopped_reading_is_dropped_and_its_run_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended: list[str] = []

    async def run() -> AsyncIterator[Any]:
        try:
            for n in range(1000):  # a run with far more to say than the socket holds
                yield SimpleNamespace(type="tool_result", model_dump=lambda n=n, **_: {"n": n})
                await asyncio.sleep(0)
        finally:
            ended.append("run")

    async def serve() -> tuple[Client, bool]:
        api, client = _api(), Client(room=3)
        response = sse(until_stop(api, "r-stuck", run()))
        answer = asyncio.ensure_future(response(SCOPE, client.receive, client.send))
        await client.stuck.wait()
        cut_streams(api)  # the stop's cut, a second before uvicorn's bound
        return client, await _settled(answer) and answer.exception() is None

    before = _QUIET.dropped
    with caplog.at_level(logging.WARNING, logger="fim.server"):
        client, ended_cleanly = asyncio.run(serve())
    assert ended_cleanly  # not left for uvicorn to cancel at its bound
    assert ended == ["run"]  # its tools stop: the run was closed, in its stream's task
    assert b"server_shutting_down" not in client.body()  # nobody reads it: none is sent
    (line,) = [r.getMessage() for r in caplog.records if "cut streamed run" in r.getMessage()]
    assert "r-stuck" in line and "its client was not reading" in line
    assert _QUIET.dropped == before + 1  # uvicorn's "returned without completing" is fim's
    record = logging.makeLogRecord({"msg": "ASGI callable returned without completing response."})
    assert not _QUIET.filter(record)
    assert _QUIET.dropped == before


def test_a_stream_that_keeps_reading_still_gets_its_last_event() -> None:
    """The send is abandoned only if it is still stuck after the cut: a client that reads
    gets the error event, as before."""

    async def run() -> AsyncIterator[Any]:
        yield SimpleNamespace(type="run_started", model_dump=lambda **_: {"run_id": "r"})
        await asyncio.Event().wait()  # the model never answers

    async def serve() -> bytes:
        api, client = _api(), Client(room=100)
        response = sse(until_stop(api, "r-reads", run()))
        answer = asyncio.ensure_future(response(SCOPE, client.receive, client.send))
        until_sent = asyncio.ensure_future(_sent_twice(client))
        await until_sent
        cut_streams(api)
        assert await _settled(answer)
        return client.body()

    body = asyncio.run(serve())
    assert body.rstrip().splitlines()[-2] == b"event: error"
    assert CUT.encode() in body


async def _sent_twice(client: Client) -> None:
    while len(client.sent) < 2:
        await asyncio.sleep(0)


def test_a_follower_of_a_run_ends_as_a_response_ends() -> None:
    closed: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"id: 1\nevent: run_started\ndata: {}\n\n"
            await asyncio.Event().wait()  # the run goes on elsewhere
        finally:
            closed.append("tail")

    async def serve() -> Client:
        api, client = _api(), Client(room=100)
        answer = asyncio.ensure_future(followed(api, frames())(SCOPE, client.receive, client.send))
        await _sent_twice(client)
        cut_streams(api)
        assert await _settled(answer) and answer.exception() is None
        return client

    client = asyncio.run(serve())
    assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert closed == ["tail"]
    assert b"error" not in client.body()  # not the run's end: the client reconnects


def test_an_a2a_run_whose_updates_nobody_takes_is_closed_at_the_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its client stopped reading, the task's event queue filled up: the executor's update
    is abandoned as a stuck send is, and the run closed."""
    pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")
    from fim.server.a2a_surface import FimExecutor

    ended: list[str] = []

    async def run(*_: Any, **__: Any) -> AsyncIterator[Any]:
        try:
            for n in range(100):
                yield SimpleNamespace(type="tool_result", model_dump=lambda n=n, **_: {"n": n})
        finally:
            ended.append("run")

    async def history(*_: Any) -> list[Any]:
        return []

    class Queue:
        def __init__(self) -> None:
            self.taken, self.full = 0, asyncio.Event()

        async def enqueue_event(self, event: Any) -> None:
            if self.taken == 4:  # the task, `working`, two updates: then full
                self.full.set()
                await asyncio.Event().wait()
            self.taken += 1

    async def serve() -> bool:
        snapshot = SimpleNamespace(agents={"a": None})
        api = SimpleNamespace(
            services=Services(), holder=SimpleNamespace(current=snapshot), history=history
        )
        api.events = run
        context = SimpleNamespace(
            call_context=SimpleNamespace(state={"agent": "a", "owner": ""}),
            task_id="t1",
            context_id="c1",
            current_task=None,
            message=None,
            get_user_input=lambda: "hi",
        )
        queue = Queue()
        executed = asyncio.ensure_future(FimExecutor(api).execute(context, queue))  # type: ignore[arg-type]
        await queue.full.wait()
        cut_streams(api)
        return await _settled(executed) and executed.exception() is None

    with caplog.at_level(logging.WARNING, logger="fim.server"):
        assert asyncio.run(serve())
    assert ended == ["run"]
    assert "its client was not reading" in caplog.text


# ------------------------------------------------------------------ A2A, one process


def test_an_a2a_stream_ends_with_the_cut_as_its_tasks_final_status(tmp_path: Path) -> None:
    pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: a2astop\n")
    lines: list[str] = []
    with OpenAIStubServer() as stub:
        stub.hang_next(1)
        (root / "agents" / "slow.yaml").write_text(
            "description: never answered\n"
            f"model: {{model: openai/stub, api_base: '{stub.base_url}', api_key: x}}\n"
        )
        flags = ("--shutdown-timeout", "2", "--log-level", "info")
        with fim_server(root, *flags) as (url, proc):
            message = {
                "role": "user",
                "parts": [{"kind": "text", "text": "hi"}],
                "messageId": uuid.uuid4().hex,
            }
            body = {"jsonrpc": "2.0", "id": 1, "method": "message/stream"}
            body["params"] = {"message": message}

            def read() -> None:
                with httpx.stream("POST", f"{url}/a2a/slow", json=body, timeout=60) as r:
                    lines.extend(line for line in r.iter_lines() if line.startswith("data:"))

            reader = threading.Thread(target=read)
            reader.start()
            until(lambda: len(stub.requests) >= 1, what="the run waiting on the model")
            proc.send_signal(signal.SIGTERM)
            reader.join(timeout=60)
            assert proc.wait(timeout=60) == 0
    last = json.loads(lines[-1].removeprefix("data:"))["result"]
    assert last["final"] is True and last["status"]["state"] in ("failed", "TASK_STATE_FAILED")
    said = last["status"]["message"]["parts"][0]["text"]
    assert said.startswith("the server is stopping and cut run ")
    event = json.loads(last["metadata"]["fim_event_json"])
    assert event["kind"] == CUT and last["metadata"]["fim_event"] == "error"
    log = next(root.glob("serve-*.log")).read_text()
    assert log.count("stopping: cut streamed run") == 1
    assert "Traceback" not in log and "Exception in ASGI application" not in log


def test_an_openai_stream_whose_client_stopped_reading_is_dropped_and_its_run_closed() -> None:
    """`/v1/chat/completions` with `stream: true` is dropped as fim's own SSE is."""
    from fim.server.openai_compat import OpenAICompat
    from fim.server.streams import EventStream

    closed_in: list[asyncio.Task[Any] | None] = []

    async def events(*_: Any, **__: Any) -> AsyncIterator[Any]:
        try:
            for n in range(1000):
                yield SimpleNamespace(type="token", text=f"word {n} ")
                await asyncio.sleep(0)
        finally:
            closed_in.append(asyncio.current_task())

    async def serve() -> bool:
        api, client = SimpleNamespace(services=Services(), events=events), Client(room=3)
        chunks = OpenAICompat(api)._chunks("a", [], "chatcmpl-1", "r-oai", False)  # type: ignore[arg-type]
        answer = asyncio.ensure_future(EventStream(chunks)(SCOPE, client.receive, client.send))
        await client.stuck.wait()
        streaming = asyncio.all_tasks()
        cut_streams(api)
        settled = await _settled(answer) and answer.exception() is None
        return settled and closed_in[0] in streaming  # by its stream, not the GC hook's task

    assert asyncio.run(serve())


def test_a_follower_over_http_ends_cleanly_when_the_server_stops(tmp_path: Path) -> None:
    """`GET /v1/runs/{id}/events` of a run that never ends, on a server told to stop: the
    follower's response ends before uvicorn's bound, with no traceback in the log."""
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: followstop\n")
    followed: list[str] = []
    with OpenAIStubServer() as stub:
        stub.hang_next(1)
        (root / "agents" / "slow.yaml").write_text(
            "description: never answered\n"
            f"model: {{model: openai/stub, api_base: '{stub.base_url}', api_key: x}}\n"
        )
        with fim_server(root, "--shutdown-timeout", "2", "--log-level", "info") as (url, proc):
            body = {"input": "hi", "stream": True}
            with httpx.stream("POST", f"{url}/v1/agents/slow/runs", json=body, timeout=60) as r:
                first = next(line for line in r.iter_lines() if line.startswith("data:"))
                run_id = json.loads(first.removeprefix("data:"))["run_id"]

                def follow() -> None:
                    path = f"{url}/v1/runs/{run_id}/events"
                    with httpx.stream("GET", path, timeout=60) as tail:
                        followed.extend(tail.iter_lines())
                    followed.append("ended")

                follower = threading.Thread(target=follow)
                follower.start()
                until(lambda: len(followed) > 0, what="the follower reading the run")
                proc.send_signal(signal.SIGTERM)
                follower.join(timeout=60)
                assert proc.wait(timeout=60) == 0
    assert followed[-1] == "ended"  # a whole response, not a broken chunked body
    log = next(root.glob("serve-*.log")).read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log
