"""A keyed request whose body does not arrive in time is answered 408 and its connection
closed (`fim.server.http.BODY_SECONDS`), instead of being held open forever.

The ASGI app is driven directly on an event loop whose clock the test moves forward: no
wall-clock waits, no sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.server.http import BODY_SECONDS
from tests.http_stubs import post_scope


class _MovableLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves forward by hand."""

    offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


def _app(root: Path) -> Any:
    (root / "fim.yaml").write_text(
        'name: slow\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-a]}\n'
    )
    (root / "agents").mkdir()
    (root / "agents" / "quick.yaml").write_text(
        "description: says hi\nmodel: scripted:quick.script.yaml\n"
    )
    (root / "quick.script.yaml").write_text('- text: "hi"\n')
    return create_app(SnapshotHolder(compile_project(root)))


def _scope(length: int) -> dict[str, Any]:
    return post_scope("/v1/agents/quick/runs", length)


Receive = Callable[[], Awaitable[dict[str, Any]]]


def _drive(app: Any, body: bytes, receive: Receive, later: float) -> list[dict[str, Any]]:
    """Run one request: let it start, move the loop's clock `later` seconds forward, let it
    go on; the messages the app sent."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        task = asyncio.ensure_future(app(_scope(len(body)), receive, send))
        for _ in range(50):
            await asyncio.sleep(0)
        _MovableLoop.offset = later
        await asyncio.wait({task}, timeout=10)  # the loop's seconds; done at once either way
        task.cancel()

    loop = _MovableLoop()
    try:
        loop.run_until_complete(main())
    finally:
        _MovableLoop.offset = 0.0
        loop.close()
    return sent


def _status(sent: list[dict[str, Any]]) -> int | None:
    starts = [m for m in sent if m["type"] == "http.response.start"]
    return starts[0]["status"] if starts else None


def test_a_body_not_complete_within_the_deadline_is_a_408_that_closes_the_connection(
    tmp_path: Path,
) -> None:
    """4 bytes of a 100-byte body, then nothing: past `BODY_SECONDS` the answer is 408,
    naming the body and the deadline, with `Connection: close` (the rest is not read)."""
    app = _app(tmp_path)
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b'{"in', "more_body": True}
        await asyncio.Event().wait()  # the rest never comes
        return {"type": "http.disconnect"}

    sent = _drive(app, b"x" * 100, receive, later=BODY_SECONDS + 1)
    assert _status(sent) == 408
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert (b"connection", b"close") in [(k.lower(), v) for k, v in start["headers"]]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    message = json.loads(body)["error"]["message"]
    assert "body" in message and f"{BODY_SECONDS:g}" in message


def test_a_body_still_arriving_before_the_deadline_is_waited_for(tmp_path: Path) -> None:
    """A body whose last bytes come just before the deadline is read and served."""
    app = _app(tmp_path)
    payload = json.dumps({"input": "hi"}).encode()
    parts = [payload[:4], payload[4:]]

    async def receive() -> dict[str, Any]:
        if len(parts) == 2:
            return {"type": "http.request", "body": parts.pop(0), "more_body": True}
        if parts:
            while _MovableLoop.offset == 0.0:  # the rest comes once the clock has moved
                await asyncio.sleep(0)
            return {"type": "http.request", "body": parts.pop(0), "more_body": False}
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    sent = _drive(app, payload, receive, later=BODY_SECONDS - 1)
    assert _status(sent) == 200
