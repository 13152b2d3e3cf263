"""The interop routes of `fim serve`: MCP at `/mcp`, A2A cards and JSON-RPC at
`/.well-known/agent-card.json` and `/a2a/{agent}`.

Both SDKs take about half a second to import, so each surface is built by the first request
that reaches it (on the server's loop), not when the app is created: a server, or a test,
that never speaks MCP or A2A does not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from fim.server.api import Api


class _Lazy:
    """An ASGI app built on first use; a surface whose SDK is not installed answers 501
    with the package to install."""

    def __init__(self, build: Callable[[], ASGIApp], needs: str) -> None:
        self.build = build
        self.needs = needs
        self.app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            try:
                self.app = self.build()
            except ImportError as exc:
                # deferred: loading fim.server.http costs tens of ms
                from fim.server.http import error

                response = error(501, f"this surface needs {self.needs} ({exc.name} is missing)",
                                 f"pip install '{self.needs}'")  # fmt: skip
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


CARD = "/.well-known/agent-card.json"


def interop_handlers(api: Api) -> dict[str, Any]:
    """The lazily built MCP and A2A apps of the `interop` area (`fim.server.areas.interop`)."""

    def mcp() -> ASGIApp:
        # deferred: loading mcp_types costs hundreds of ms
        from fim.server.mcp_sessions import McpEndpoint

        return McpEndpoint(api)

    def a2a() -> ASGIApp:
        # deferred: loading a2a costs hundreds of ms
        from fim.server.a2a_surface import a2a_app

        return a2a_app(api)

    return {"mcp": _Lazy(mcp, "mcp"), "a2a": _Lazy(a2a, "fim[a2a]")}
