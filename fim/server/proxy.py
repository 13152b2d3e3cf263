"""`fim serve` behind a reverse proxy that serves it under a path prefix
(`https://ops.example.com/fim/` -> `server.root_path: /fim`).

`RootPath` wraps the app: a request may arrive with the prefix (a proxy that passes the
path on) or without it (one that strips it); the routes always see the path without it, so
the key check's public paths (`/healthz`, the page) and the routing stay as they are.
URLs fim hands out carry the prefix: the 202 `Location` and `url` of a background run
(`public_path`), and Starlette's `base_url` (the A2A agent card), through the scope's
`app_root_path`. The development page uses relative paths, so it works under any prefix.

This is not uvicorn's `root_path`: that one prepends the prefix to every request's path
(the ASGI convention), which every check on `scope["path"]` would then have to strip.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

_PREFIX: ContextVar[str] = ContextVar("fim_root_path", default="")


def public_path(path: str) -> str:
    """`path` (`/v1/runs/x`) as a client behind the proxy reaches it (`/fim/v1/runs/x`)."""
    return _PREFIX.get() + path


class RootPath:
    """The app served under `prefix` (`/fim`; see the module docstring)."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        prefix, path = self.prefix, scope["path"]
        scope = dict(scope)
        if path == prefix or path.startswith(prefix + "/"):  # the proxy kept the prefix
            rest = path[len(prefix) :] or "/"
            scope["path"] = rest
            raw = scope.get("raw_path")
            if isinstance(raw, bytes) and raw.startswith(prefix.encode()):
                scope["raw_path"] = raw[len(prefix) :] or b"/"
        scope["app_root_path"] = prefix
        token = _PREFIX.set(prefix)
        try:
            await self.app(scope, receive, send)
        finally:
            _PREFIX.reset(token)


def behind(app: ASGIApp, prefix: str) -> ASGIApp:
    """`app` served under `prefix`; `app` itself when there is none."""
    return RootPath(app, prefix) if prefix else app
