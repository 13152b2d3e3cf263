"""The request side of the HTTP API: the middleware every request passes (`Guard`: the key,
cross-site requests, the body size limit; `AccessLog`) and the whole numbers a request
names in a header or query parameter (a route's query string is `fim.server.queries`).

Who a request is from is `fim.server.callers`, what a route answers with
`fim.server.replies`, event streams and disconnects `fim.server.streams`; their names are
imported from here too, where the routes have always found them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fim.observe.logs import one_line
from fim.server.callers import (
    CALLER,
    OPEN,
    Caller,
    bearer,
    caller,
    identify,
    key_owner,
    one_of,
    run_scope,
    server_keys,
    session_owner,
)
from fim.server.cross_site import refusal
from fim.server.public import is_public
from fim.server.replies import INVALID_TOKEN, JSONResponse, error
from fim.server.streams import cancel_on_disconnect, sse

if TYPE_CHECKING:
    from fim.build.reload import SnapshotHolder

__all__ = [
    "CALLER",
    "MAX_INT64",
    "OPEN",
    "AccessLog",
    "Caller",
    "Guard",
    "JSONResponse",
    "bearer",
    "caller",
    "cancel_on_disconnect",
    "error",
    "identify",
    "key_owner",
    "one_of",
    "run_scope",
    "server_keys",
    "session_owner",
    "sse",
    "whole_number",
]

log = logging.getLogger("fim.server")


BODY_SECONDS = 30.0
"""How long `Guard` waits for a request's whole body, from when it starts reading it (the
headers are in). A key's client that sends `Content-Length: 100` and 4 bytes would
otherwise hold its connection and task forever (uvicorn's `timeout_keep_alive` covers only
idle connections between requests); past this the answer is 408 with `Connection: close`.
A body of `max_body_bytes` (1 MiB by default) arrives well within it on any working link.
Slow *headers* are uvicorn's (it has no header timeout): a proxy's request timeouts cover
those."""

MAX_INT64 = 2**63 - 1
"""The largest number a whole-number header or query parameter may name: the largest
integer SQLite and PostgreSQL take as a query's parameter (past it the query fails), and a
longer digit string costs `int()` quadratic time."""


def whole_number(raw: str | bytes) -> int | None:
    """`raw` as a number from 0 to `MAX_INT64`, or None. Only ASCII digits count:
    `str.isdigit()` also takes `²` and `①`, which `int()` refuses, and `int()` takes `+1`,
    ` 1`, `1_0` and other scripts' digits, none of which a client means as a number."""
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_INT64)):
        return None
    value = int(text)
    return value if value <= MAX_INT64 else None


SEVERAL_KEYS = b"\0several"
"""`checked_key` of a request with more than one `Authorization` header."""


def unguarded(path: str) -> bool:
    """A path anyone may ask for, key or not: the probes and the page's assets."""
    return path in ("/healthz", "/readyz") or is_public(path)


def checked_key(scope: Scope, keys: Any) -> bytes | None:
    """The key a request presents when it is one of the server's `keys`; `SEVERAL_KEYS`
    when it sends more than one `Authorization` header; None for none or a wrong one.
    `Guard` refuses all but the first; the trace middleware asks it too (a caller's trace
    is continued only once its key checks out)."""
    sent = [v for k, v in scope["headers"] if k.lower() == b"authorization"]
    if len(sent) > 1:
        return SEVERAL_KEYS
    token = bearer(sent[0].decode("latin-1") if sent else "")
    return token if one_of(token, keys) else None


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
    `Connection: close`; a body not complete within `BODY_SECONDS` is a 408, also closing.
    The route then reads the buffered body. An unhandled error becomes a 500 here instead
    of propagating to uvicorn, which would drop the keep-alive connection (and the
    client's next request on it)."""

    def __init__(self, app: ASGIApp, holder: SnapshotHolder) -> None:
        self.app = app
        self.holder = holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # no route takes one: a new one would be unguarded
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http" or unguarded(scope["path"]):
            await self.app(scope, receive, send)
            return
        settings = self.holder.current.project.server
        keys = server_keys(settings)
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:  # the first of a name, as Starlette reads it
            headers.setdefault(name, value)
        me = OPEN
        if keys:
            token = checked_key(scope, keys)
            if token == SEVERAL_KEYS:  # which one counts would be each reader's choice
                response = error(
                    400,
                    "several Authorization headers; a request carries one key",
                    "send a single Authorization: Bearer <key>",
                )
                await response(scope, receive, send)
                return
            if token is None:
                response = error(
                    401, "missing or invalid API key", "send Authorization: Bearer <key>"
                )
                if any(k.lower() == b"authorization" for k, _ in scope["headers"]):
                    response.headers["WWW-Authenticate"] = INVALID_TOKEN
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
        try:
            async with asyncio.timeout(BODY_SECONDS):
                body = await _read_body(receive, limit)
        except TimeoutError:
            await _too_slow()(scope, receive, send)
            return
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
        except Exception as exc:
            # deferred: loaded only when a request failed
            from fim.store.health import store_failure

            if (line := store_failure(exc)) is not None:  # the store's, not fim's: one line
                log.error("state store unavailable on %s: %s", scope.get("path"), line)
                if not started:
                    await store_unavailable()(scope, receive, send)
                return
            log.exception("unhandled error on %s", scope.get("path"))
            if not started:
                await error(500, "internal error; see the server log")(scope, receive, send)


def store_unavailable() -> JSONResponse:
    """A 503 `store_unavailable`: the server cannot reach or use its state store (the log
    has why), marked not to be retried at once by the OpenAI SDKs, so a broken backend is
    not asked three times; `/readyz` answers 503 meanwhile."""
    response = error(
        503,
        "the server's state store is unavailable; the request was not completed",
        "retry later; the operator finds the cause in the server log and GET /v1/status",
        code="store_unavailable",
    )
    response.headers["x-should-retry"] = "false"
    return response


def _too_large(limit: int) -> JSONResponse:
    response = error(413, f"request body larger than {limit} bytes", "send a smaller body")
    response.headers["Connection"] = "close"  # do not read (or wait for) the rest of it
    return response


def _too_slow() -> JSONResponse:
    response = error(
        408,
        f"request body not complete within {BODY_SECONDS:g} seconds",
        "send the whole body at once; the connection is closed",
    )
    response.headers["Connection"] = "close"  # the rest of the body is not waited for
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


def _logged_path(scope: Scope) -> str:
    """The path as the client sent it (`raw_path`, still percent-encoded), any control
    character left in it escaped: the decoded path turns `%0A` into a newline, which
    wrote a second, forged line into the log, and `%1B` into an escape sequence for the
    terminal of whoever watches it."""
    raw = scope.get("raw_path")
    path = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else scope["path"]
    return one_line(path)


class AccessLog:
    """One line per request on the `fim.access` logger, written when the response ends
    (a stream's line comes when it closes): method, path as sent, status, duration,
    bytes, in the message and as the record's fields (`--log-format json` writes them)."""

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
            path = _logged_path(scope)
            duration = (time.perf_counter() - started) * 1000
            # the same values as fields: a JSON log's pipeline filters on them
            fields = {
                "client": client[0],
                "method": scope["method"],
                "path": path,
                "status": status,
                "duration_ms": round(duration, 1),
                "bytes": size,
            }
            self.log.info(
                '%s "%s %s" %d %.1f ms %d B',
                client[0], scope["method"], path, status, duration, size, extra=fields,
            )  # fmt: skip
