"""Answers that outlive one write: server-sent events, and work cancelled when its client
goes away.

`sse` frames a run's events, masking each as values and its tokens as one stream (a secret
split over two tokens is still caught); `cancel_on_disconnect` stops a run nobody waits
for; `EventStream` is a stream the stopping server may drop when its client stopped
reading. Kept apart from the request side (`fim.server.http`): these follow a response to
its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Send

from fim.errors import FimError
from fim.masking import StreamMasker, known
from fim.server.refusals import refusal
from fim.server.stopping import SENDING, Sending, StreamCut, until_stop


async def cancel_on_disconnect(request: Request, work: Any) -> Any:
    """Run `work`, cancelling it if the client goes away (a run nobody waits for is waste)."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while not task.done():
            message = await request.receive()
            if message["type"] == "http.disconnect":
                task.cancel()
                return

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if watcher.done():
            return None
        raise
    finally:
        watcher.cancel()


class Refused(Exception):
    """Raised by a run's stream before its first chunk: the run was refused before it
    started, and `response` (`fim.server.refusals.refusal`: a 503) is the whole answer."""

    def __init__(self, response: Response) -> None:
        super().__init__("refused")
        self.response = response


class EventStream(StreamingResponse):
    """A streamed answer whose send the stopping server may abandon (`Sending`): a client
    that stopped reading left the stream parked in `send` past the cut, its run going on,
    until uvicorn cancelled it at the bound with a traceback and the server exited
    seconds late (attack-47 F4). Abandoned, the send is cancelled, the body closed here
    (its run ends and logs its cut, in this task) and the response ends unfinished:
    nobody reads it, and uvicorn closes the connection.

    `held` (a run's stream): the headers wait for the body's first chunk, so a run refused
    before it (`Refused`) is answered with its 503, not a 200 stream (newcomer-52 #5)."""

    held = False

    async def stream_response(self, send: Send) -> None:
        sending = Sending()
        token = SENDING.set(sending)
        try:
            if self.held:
                await self._held_response(send)
            else:
                await super().stream_response(send)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not sending.abandoned or task is None:
                raise
            task.uncancel()
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()
        finally:
            sending.over = True
            SENDING.reset(token)

    async def _held_response(self, send: Send) -> None:
        body = aiter(self.body_iterator)
        try:
            first: Any = await anext(body)
        except StopAsyncIteration:
            first = None
        except Refused as refused:
            answer = refused.response
            start = {"status": answer.status_code, "headers": answer.raw_headers}
            await send({"type": "http.response.start", **start})
            await send({"type": "http.response.body", "body": answer.body})
            return
        self.body_iterator = _chained(first, body)
        await super().stream_response(send)


async def _chained(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    try:
        if first is not None:
            yield first
        async for chunk in rest:
            yield chunk
    finally:
        close = getattr(rest, "aclose", None)
        if close is not None:
            await close()


def sse(events: AsyncIterator[Any], *, refusable: bool = False) -> StreamingResponse:
    """Server-sent events: `event: <type>` and `data: <json>` per event, each masked as
    values; tokens are masked as a stream, so a secret split over two tokens is caught.
    A run the stopping server cut (`fim.server.stopping.until_stop`) ends with its `error`
    event, `kind: server_shutting_down`. `refusable` (an agent run's): a run refused before its
    first event is answered with the refusal's 503 (`EventStream`)."""
    mask = known()
    tokens = StreamMasker(mask)

    def frame(kind: str, payload: dict[str, Any]) -> bytes:
        data = json.dumps(mask.value(payload), ensure_ascii=False)
        return f"event: {kind}\ndata: {data}\n\n".encode()

    async def body() -> AsyncIterator[bytes]:
        last_token: dict[str, Any] | None = None
        started = False
        try:
            async for event in events:
                started = True
                payload = event.model_dump(mode="json")
                if event.type == "token":
                    last_token, payload["text"] = payload, tokens.feed(payload.get("text", ""))
                    if payload["text"]:
                        yield frame("token", payload)
                    continue
                held = tokens.flush()
                if held and last_token is not None:
                    yield frame("token", {**last_token, "text": held})
                yield frame(event.type, payload)
        except StreamCut as cut:
            yield frame("error", cut.event())
        except FimError as exc:
            if refusable and not started:  # refused before it started: a 503 (`EventStream`)
                raise Refused(refusal(exc)) from None
            yield frame("error", {"type": "error", "message": str(exc)})
        finally:  # closed before its end (an abandoned send): the run's stream too
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    stream = EventStream(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    stream.held = refusable
    return stream


def followed(api: Any, frames: AsyncIterator[bytes]) -> StreamingResponse:
    """Server-sent events (`frames`) that follow a run this stream does not drive (`GET
    /v1/runs/{id}/events`). A stopping server ends them before its bound as a response
    ends (the client reconnects to another replica with `Last-Event-ID`), not cut by
    uvicorn's bound with a broken chunked body and a traceback (attack-47 F4)."""

    async def body() -> AsyncIterator[bytes]:
        with contextlib.suppress(StreamCut):
            async with contextlib.aclosing(until_stop(api, "", frames)) as stream:
                async for frame in stream:
                    yield frame

    return EventStream(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
