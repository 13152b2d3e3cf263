"""HTTP plumbing shared by the routes: JSON errors, the key/size guard, SSE, and
cancelling work whose client went away."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse as _JSONResponse
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fim.errors import FimError
from fim.masking import StreamMasker, known
from fim.server.cross_site import refusal
from fim.server.public import is_public

if TYPE_CHECKING:
    from fim.build.reload import SnapshotHolder
    from fim.config.schema import ServerSettings

log = logging.getLogger("fim.server")


class JSONResponse(_JSONResponse):
    """Every JSON body of the API, masked as values (`fim.masking.known`) before it is
    serialised: a secret never leaves in any encoding, whichever route built the body."""

    def render(self, content: Any) -> bytes:
        return super().render(known().value(content))


def server_keys(settings: ServerSettings) -> list[str]:
    """Every bearer key the server accepts: `api_keys` (tenants' too) and `operator_keys`,
    empty ones ignored. None: the server is open."""
    keys = [k if isinstance(k, str) else k.key for k in settings.api_keys]
    return [k for k in (*keys, *settings.operator_keys) if k]


def bearer(authorization: str) -> bytes:
    """The key of an `Authorization: Bearer <key>` header value (empty when it has none)."""
    return (authorization[7:] if authorization.lower().startswith("bearer ") else "").encode()


def one_of(token: bytes, keys: list[str]) -> bool:
    """Whether `token` is one of `keys` (empty ones never match), each compared in
    constant time."""
    return any(hmac.compare_digest(token, k.encode()) for k in keys if k)


CALLER = "fim.caller"
"""The ASGI scope key under which `Guard` records the `Caller` it let in."""

MAX_INT64 = 2**63 - 1
"""The largest number a whole-number header or query parameter may name: the largest
integer SQLite and PostgreSQL take as a query's parameter (past it the query fails), and a
longer digit string costs `int()` quadratic time."""


@dataclass(frozen=True)
class Caller:
    """Who `Guard` let a request in as, decided once from the one `Authorization` header it
    verified and kept in the ASGI scope (`CALLER`). Every owner decision (sessions, runs,
    limits, budgets, MCP sessions, A2A tasks) reads this, never the request's headers
    again: a second header the check did not look at cannot choose the owner."""

    owner: str
    """A hash of the key, or of its tenant (whose keys share what they own); "" on a
    server without keys, where every caller is one."""
    key: str
    """A hash of the key alone, tenant or not: what an MCP session is bound to (the SDK
    serves a session only to the credential that opened it); "" without keys."""
    operator: bool = False
    """An `operator_keys` key: it sees every run and decides every approval."""


OPEN = Caller(owner="", key="")
"""Every caller of a server without keys."""


def identify(token: bytes, settings: ServerSettings) -> Caller:
    """The caller a verified key `token` is: its owner (its tenant's, when it has one),
    whether it is an operator key. Every key is compared, in constant time each."""
    tenant = ""
    for key in settings.api_keys:
        if not isinstance(key, str) and key.key and hmac.compare_digest(token, key.key.encode()):
            tenant = key.tenant
    return Caller(
        owner=key_owner(token, tenant),
        key=key_owner(token),
        operator=one_of(token, settings.operator_keys),
    )


def caller(scope: Scope) -> Caller:
    """The caller `Guard` recorded for this request. A route reached without passing the
    Guard has none, and deciding an owner there is a bug: it fails instead of guessing."""
    found = scope.get(CALLER)
    if not isinstance(found, Caller):
        raise RuntimeError(f"no verified caller for {scope.get('path')!r}: not behind the Guard")
    return found


def session_owner(request: Request) -> str:
    """Who a session (and a run) belongs to: a hash of the bearer key the request was let
    in with (never the key itself), or "" when the server has no keys (anyone may continue
    any session, as before)."""
    return caller(request.scope).owner


def key_owner(token: bytes, tenant: str = "") -> str:
    """The owner hash of a key, or of the tenant it belongs to (whose keys share what they
    own)."""
    if tenant:
        return hashlib.sha256(b"fim-tenant\0" + tenant.encode()).hexdigest()
    return hashlib.sha256(b"fim-session-owner\0" + token).hexdigest()


def whole_number(raw: str | bytes) -> int | None:
    """`raw` as a number from 0 to `MAX_INT64`, or None. Only ASCII digits count:
    `str.isdigit()` also takes `²` and `①`, which `int()` refuses, and `int()` takes `+1`,
    ` 1`, `1_0` and other scripts' digits, none of which a client means as a number."""
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_INT64)):
        return None
    value = int(text)
    return value if value <= MAX_INT64 else None


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int | Response:
    """The whole-number query parameter `name` from `low` to `high` (the range its route's
    OpenAPI entry states), or the 400 naming it."""
    raw = request.query_params.get(name, str(default))
    value = whole_number(raw)
    if value is None or not low <= value <= high:
        return error(
            400, f"{name}: a whole number from {low} to {high}, got {raw[:40]!r}", param=name
        )
    return value


def run_scope(request: Request) -> str | None:
    """Whose runs and approvals this caller sees (`fim.store.owners`): its own, by the hash
    of its key; None, every one, on a server without keys or for an operator key."""
    me = caller(request.scope)
    return None if me.operator else me.owner or None


_CODES = {
    400: "invalid_request",
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    499: "client_closed_request",
    503: "unavailable",
}


def error(
    status: int,
    message: str,
    hint: str | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    """An error in OpenAI's shape (`message`, `type`, `param`, `code`) on every route, so
    one client-side handler reads them all; `hint` is fim's own addition."""
    kind = (
        "server_error"
        if status >= 500
        else "authentication_error"
        if status == 401
        else "invalid_request_error"
    )
    body: dict[str, Any] = {
        "error": {
            "message": message,
            "type": kind,
            "param": param,
            "code": code or _CODES.get(status, "server_error" if status >= 500 else "error"),
        }
    }
    if hint:
        body["error"]["hint"] = hint
    return JSONResponse(body, status_code=status)


class Guard:
    """Bearer API keys (constant-time compare), requests a web page sent that this server
    did not ask for (`fim.server.cross_site`), the request body size limit, and a last
    resort for unhandled errors, as raw ASGI middleware so streaming responses are not
    buffered.

    The key checked is the one every later decision uses: a request with more than one
    `Authorization` header is a 400 (the check and a route could each read another one),
    and the caller the key makes (`Caller`: its owner, whether it is an operator's) is
    recorded in the scope under `CALLER` for the routes, which never read the header.

    The body is read here, up to `max_body_bytes`, whether or not a Content-Length was sent
    (a chunked body has none): past the limit reading stops and the answer is 413 with
    `Connection: close`. The route then reads the buffered body. An unhandled error becomes
    a 500 here instead of propagating to uvicorn, which would drop the keep-alive
    connection (and the client's next request on it)."""

    def __init__(self, app: ASGIApp, holder: SnapshotHolder) -> None:
        self.app = app
        self.holder = holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # no route takes one: a new one would be unguarded
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http" or scope["path"] == "/healthz" or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        settings = self.holder.current.project.server
        keys = server_keys(settings)
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:  # the first of a name, as Starlette reads it
            headers.setdefault(name, value)
        me = OPEN
        if keys:
            sent = [v for k, v in scope["headers"] if k.lower() == b"authorization"]
            if len(sent) > 1:  # which one counts would be each reader's choice: none does
                response = error(
                    400,
                    f"{len(sent)} Authorization headers; a request carries one key",
                    "send a single Authorization: Bearer <key>",
                )
                await response(scope, receive, send)
                return
            token = bearer(sent[0].decode("latin-1") if sent else "")
            if not one_of(token, keys):
                response = error(
                    401, "missing or invalid API key", "send Authorization: Bearer <key>"
                )
                await response(scope, receive, send)
                return
            me = identify(token, settings)
        scope[CALLER] = me  # the routes' only source of who is asking
        refused = refusal(scope["method"], headers, settings, bool(keys))
        if refused is not None:  # a web page's request this server did not ask for
            await error(*refused)(scope, receive, send)
            return
        limit = settings.max_body_bytes
        length = whole_number(headers.get(b"content-length", b"0"))
        if length is None or length > limit:
            await _too_large(limit)(scope, receive, send)
            return
        body = await _read_body(receive, limit)
        if body is None:
            await _too_large(limit)(scope, receive, send)
            return
        if isinstance(body, dict):  # the client went away while sending
            return
        await self._app(scope, _replay(body, receive), send)

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            log.exception("unhandled error on %s", scope.get("path"))
            if not started:
                await error(500, "internal error; see the server log")(scope, receive, send)


def _too_large(limit: int) -> JSONResponse:
    response = error(413, f"request body larger than {limit} bytes", "send a smaller body")
    response.headers["Connection"] = "close"  # do not read (or wait for) the rest of it
    return response


async def _read_body(receive: Receive, limit: int) -> bytes | dict[str, Any] | None:
    """The whole body, None past `limit` bytes, or the disconnect message."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return dict(message)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands out the buffered body once, then the real channel (so a
    route can still notice the client disconnecting)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class AccessLog:
    """One line per request on the `fim.access` logger, written when the response ends
    (a stream's line comes when it closes): method, path, status, duration, bytes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log = logging.getLogger("fim.access")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.log.isEnabledFor(20):  # INFO
            await self.app(scope, receive, send)
            return

        started = time.perf_counter()
        status, size = 500, 0

        async def sending(message: Message) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client") or ("-", 0)
            self.log.info(
                '%s "%s %s" %d %.1f ms %d B',
                client[0],
                scope["method"],
                scope["path"],
                status,
                (time.perf_counter() - started) * 1000,
                size,
            )


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
    values; tokens are masked as a stream, so a secret split over two tokens is caught."""
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
        except FimError as exc:
            yield frame("error", {"type": "error", "message": str(exc)})

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
