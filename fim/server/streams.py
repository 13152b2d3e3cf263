"""Answers that outlive one write: server-sent events, and work cancelled when its client
goes away.

`sse` frames a run's events, masking each as values and its tokens as one stream (a secret
split over two tokens is still caught); `cancel_on_disconnect` stops a run nobody waits
for. Kept apart from the request side (`fim.server.http`): these follow a response to its
end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from fim.errors import FimError
from fim.masking import StreamMasker, known
from fim.server.stopping import StreamCut


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


def sse(events: AsyncIterator[Any]) -> StreamingResponse:
    """Server-sent events: `event: <type>` and `data: <json>` per event, each masked as
    values; tokens are masked as a stream, so a secret split over two tokens is caught.
    A run the stopping server cut (`fim.server.stopping.until_stop`) ends with its `error`
    event, `kind: server_shutting_down`."""
    mask = known()
    tokens = StreamMasker(mask)

    def frame(kind: str, payload: dict[str, Any]) -> bytes:
        data = json.dumps(mask.value(payload), ensure_ascii=False)
        return f"event: {kind}\ndata: {data}\n\n".encode()

    async def body() -> AsyncIterator[bytes]:
        last_token: dict[str, Any] | None = None
        try:
            async for event in events:
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
            yield frame("error", {"type": "error", "message": str(exc)})

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
