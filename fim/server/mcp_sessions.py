"""The `/mcp` endpoint of `fim serve`, and each key's MCP sessions on it, bounded.

The MCP SDK bounds the sessions of the whole server (10,000, each kept until it has been
idle for 30 minutes): one key opening sessions without end took them all, and every other
key's client was refused for half an hour. Here each owner (API key or tenant; every
caller together on a server without keys) may hold `SESSIONS_PER_OWNER` at once: a new
session past that is a 429 until one of its sessions ends (the client's DELETE) or has been
idle as long as the SDK keeps it. Only clients of the handshake protocol versions (2025 and
before) open sessions; the newer protocol is sessionless and never counted.

A session is its key's alone: the SDK serves a session only to the `scope["user"]` that
opened it, which is the key the Guard verified (`fim.server.callers.Caller`), so another key
that learns a session's id can neither read its stream, post to it nor end it (404).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from fim.server.http import caller, error
from fim.server.limits import Busy
from fim.server.mcp_ids import with_checked_ids
from fim.server.mcp_surface import build_server

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from fim.server.api import Api

SESSIONS_PER_OWNER = 64
IDLE_SECONDS = 1800.0
"""How long an idle session is kept: given to the SDK's session manager, counted here."""


class OwnerSessions:
    """The MCP sessions each owner holds, by id, with when each was last used."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, limit: int | None = None
    ) -> None:
        self._clock = clock
        self.limit = limit or SESSIONS_PER_OWNER
        self._held: dict[str, dict[str, float]] = {}

    def full(self, owner: str) -> bool:
        """Whether `owner` holds as many sessions as it may (idle ones forgotten first)."""
        held = self._held.get(owner)
        if not held:
            return False
        oldest = self._clock() - IDLE_SECONDS
        for session, used in list(held.items()):
            if used < oldest:
                del held[session]
        if not held:
            del self._held[owner]
        return len(held) >= self.limit

    def opened(self, owner: str, session: str) -> None:
        self._held.setdefault(owner, {})[session] = self._clock()

    def used(self, owner: str, session: str) -> None:
        """A request on a session this owner opened (another's id is not counted for it)."""
        held = self._held.get(owner)
        if held is not None and session in held:
            held[session] = self._clock()

    def ended(self, owner: str, session: str) -> None:
        held = self._held.get(owner)
        if held is not None:
            held.pop(session, None)
            if not held:
                del self._held[owner]

    def holds(self, owner: str) -> int:
        return len(self._held.get(owner, ()))


class McpEndpoint:
    """The ASGI endpoint of `/mcp`. An SDK session lives in the process that opened it, so
    one of `fim serve --workers N`'s processes (`Api.one_of_many`) serves `/mcp` stateless,
    each request whole in itself (the kernel hands a client's next request to any worker:
    it found no session, 404, attack-57 F1). That costs the GET stream, which fim's surface
    does not use (it sends its client no requests or list changes), and the cancel
    notification, which reaches another request's server: a cancelled call runs to its end,
    within the key's limits. One process keeps sessions, and cancels. The SDK's session
    manager needs a running task group; `fim serve` runs uvicorn without lifespan events,
    so it is started by the first request (on the server's loop) and lives until the loop
    ends."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.manager = StreamableHTTPSessionManager(
            app=build_server(api),
            max_request_body_size=api.holder.current.project.server.max_body_bytes,
            session_idle_timeout=IDLE_SECONDS,
            stateless=api.one_of_many,
        )
        self.sessions = OwnerSessions()
        """Each key's sessions, at most `SESSIONS_PER_OWNER` (`fim.server.mcp_sessions`)."""
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._keep(self._ready))
        await self._ready.wait()

    async def _keep(self, ready: asyncio.Event) -> None:
        async with self.manager.run():
            ready.set()
            await asyncio.Event().wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._start()
        me = caller(scope)
        owner = me.owner
        if me.key:  # the SDK serves a session only to the credential that opened it
            scope["user"] = AuthenticatedUser(
                AccessToken(token=me.key, client_id=me.key, scopes=[])
            )
        sent = _once(scope, (b"mcp-session-id", b"mcp-protocol-version"))
        if isinstance(sent, str):
            await error(400, f"more than one {sent} header", f"send one {sent}")(
                scope, receive, send
            )
            return
        if scope["method"] == "POST":  # an id the SDK would take as a notification: -32600
            limit = self.api.holder.current.project.server.max_body_bytes
            if (checked := await with_checked_ids(scope, receive, send, limit)) is None:
                return
            receive = checked
        session = sent.get(b"mcp-session-id", "")
        if session:
            self.sessions.used(owner, session)
            status = await _answered(self.manager.handle_request, scope, receive, send)
            if scope["method"] == "DELETE" and status is not None and status < 400:
                self.sessions.ended(owner, session)
            return
        version = sent.get(b"mcp-protocol-version", "")
        opens = not version or version in HANDSHAKE_PROTOCOL_VERSIONS  # else sessionless
        if scope["method"] == "POST" and opens and self.sessions.full(owner):
            refused = Busy(
                f"this API key holds {self.sessions.limit} MCP sessions, as many as it may",
                "end one (the client's DELETE, or closing it), or wait until one has been "
                f"idle {IDLE_SECONDS / 60:.0f} minutes",
                retry_after=60,
            )
            await refused.response()(scope, receive, send)
            return

        async def opened(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", ()):
                    if name.lower() == b"mcp-session-id":
                        self.sessions.opened(owner, value.decode("latin-1"))
            await send(message)

        await self.manager.handle_request(scope, receive, opened)


def _once(scope: Scope, names: tuple[bytes, ...]) -> dict[bytes, str] | str:
    """The value of each header of `names` the request sent, or the name of one it sent
    twice. The SDK reads its own copy of these headers: with two of one, it and the
    session count here could each take another (a handshake version to the SDK, a
    sessionless one here, opened sessions past the key's bound)."""
    found: dict[bytes, str] = {}
    for raw, value in scope["headers"]:
        name = raw.lower()
        if name in names:
            if name in found:
                return str(name.decode("latin-1").title())
            found[name] = value.decode("latin-1")
    return found


async def _answered(
    app: Callable[[Scope, Receive, Send], Any], scope: Scope, receive: Receive, send: Send
) -> int | None:
    """The status `app` answered with (None if it sent none): a DELETE the SDK refused
    (another key's session, an unknown one) ends no session of the caller's."""
    status: int | None = None

    async def watched(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watched)
    return status


__all__ = ["IDLE_SECONDS", "SESSIONS_PER_OWNER", "McpEndpoint", "OwnerSessions"]
