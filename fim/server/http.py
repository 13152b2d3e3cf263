"""HTTP plumbing shared by the routes: JSON errors, the key/size guard, SSE, and
cancelling work whose client went away."""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from fim.errors import FimError

if TYPE_CHECKING:
    from fim.reload import SnapshotHolder


def error(status: int, message: str, hint: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": {"message": message}}
    if hint:
        body["error"]["hint"] = hint
    return JSONResponse(body, status_code=status)


class Guard:
    """Bearer API keys (constant-time compare) and a request body size limit, as raw ASGI
    middleware so streaming responses are not buffered."""

    def __init__(self, app: ASGIApp, holder: SnapshotHolder) -> None:
        self.app = app
        self.holder = holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz":
            await self.app(scope, receive, send)
            return
        settings = self.holder.current.project.server
        keys = [k for k in settings.api_keys if k]
        headers = dict(scope["headers"])
        if keys:
            auth = headers.get(b"authorization", b"").decode("latin-1")
            token = auth[7:] if auth.lower().startswith("bearer ") else ""
            if not any(hmac.compare_digest(token.encode(), k.encode()) for k in keys):
                response = error(
                    401, "missing or invalid API key", "send Authorization: Bearer <key>"
                )
                await response(scope, receive, send)
                return
        length = headers.get(b"content-length")
        if length is not None and int(length or 0) > settings.max_body_bytes:
            await error(413, f"request body larger than {settings.max_body_bytes} bytes")(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)


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
    """Server-sent events: `event: <type>` and `data: <json>` per event."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield f"event: {event.type}\ndata: {event.model_dump_json()}\n\n".encode()
        except FimError as exc:
            payload = json.dumps({"type": "error", "message": str(exc)})
            yield f"event: error\ndata: {payload}\n\n".encode()

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
