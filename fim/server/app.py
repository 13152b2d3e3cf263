"""The HTTP API of `fim serve` (Starlette): the app assembled from its route areas.

Every request reads `holder.current` once and keeps that snapshot for its whole run, so a
hot reload never changes a request in flight. Secrets never leave: every JSON body and SSE
event is masked as values by `fim.masking` (`fim.server.http.JSONResponse`, `sse`), and
errors are rendered from our own messages, never from request bodies.

This module only assembles the app: the areas' routes and operations, the middleware, the
error handlers. What every surface runs an agent through is `fim.server.api.Api` (re-exported
here; the app keeps it as `app.state.api`); the handlers are in the route modules the areas
name (`fim.server.agent_routes` for status, agents and runs).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from fim import observe
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.yamlio import problem_in_file
from fim.errors import Problem
from fim.hosts import is_loopback
from fim.run.services import Services
from fim.server.api import Api
from fim.server.area import Area, Op
from fim.server.http import (
    SEVERAL_KEYS,
    AccessLog,
    Guard,
    checked_key,
    error,
    server_keys,
    unguarded,
)
from fim.server.openai_errors import http_error

__all__ = ["AREAS", "Api", "ReloadedCors", "create_app", "load_areas", "reload_gate"]


async def _internal_error(request: Request, exc: Exception) -> Response:
    """Log the traceback; tell the client only that it failed (no secrets, no internals)."""

    logging.getLogger("fim.server").exception("unhandled error on %s", request.url.path)
    return error(500, "internal error; see the server log")


AREAS = (
    "fim.server.areas.status",
    "fim.server.areas.agents",
    "fim.server.areas.runs",
    "fim.server.areas.live",
    "fim.server.areas.openai_compat",
    "fim.server.areas.metrics",
    "fim.server.areas.devpage",
    "fim.server.areas.workflows",
    "fim.server.areas.approvals",
    "fim.server.areas.interop",
    "fim.server.areas.usage",
    "fim.server.areas.sessions",
)
"""The route areas the app is assembled from, one file each (`fim.server.area`), in routing
order (also the order of the OpenAPI document's paths)."""


def _key_checks_out(holder: SnapshotHolder) -> Callable[[Scope], bool]:
    """Whether a request passes `Guard`'s key check, for `TraceContext`: the trace span
    starts outside `Guard` (the access line of every request, refused ones too, carries
    its ids), and a caller's `traceparent` is only honoured once its key is checked (paid
    only by a request that sends one while tracing is on). A public path is nobody's, so
    never continues a caller's trace."""

    def checks_out(scope: Scope) -> bool:
        if unguarded(scope["path"]):
            return False
        keys = server_keys(holder.current.project.server)
        return not keys or checked_key(scope, keys) not in (None, SEVERAL_KEYS)

    return checks_out


class ReloadedCors:
    """CORS headers for `server.cors_origins` as the current snapshot lists them: an origin
    a reload adds gets them at once, one it removes stops getting them (built once at start,
    they lagged a reload until a restart, while the cross-site check already followed it)."""

    def __init__(self, app: ASGIApp, holder: SnapshotHolder) -> None:
        self.app = app
        self.holder = holder
        self.built: tuple[tuple[str, ...], ASGIApp] = ((), app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origins = tuple(self.holder.current.project.server.cors_origins)
        listed, handler = self.built
        if origins != listed:
            handler = self.app
            if origins:
                handler = CORSMiddleware(
                    self.app, allow_origins=origins, allow_methods=["*"], allow_headers=["*"]
                )
            self.built = (origins, handler)
        await handler(scope, receive, send)


def reload_gate(host: str, port: int) -> Callable[[Snapshot, Snapshot], list[Problem]]:
    """What a reload must keep of the rule `fim serve` starts by (`refuse_open`) on the
    address it listens on, `host`: keys, unless that is loopback or `server.allow_open` says
    a proxy authenticates. A snapshot that breaks it is rejected like one that does not
    compile (`SnapshotHolder.gates`), so no edit or pushed commit opens a server that the
    same fim.yaml would not start. `server.host` and `server.port` changed by a reload are
    only logged, and only when they differ from the current snapshot's (the socket is bound
    at start, perhaps from `--host`/`--port`, which no reload changes)."""
    log = logging.getLogger("fim.server")

    def gate(current: Snapshot, new: Snapshot) -> list[Problem]:
        settings, was = new.project.server, current.project.server
        if (settings.host, settings.port) != (was.host, was.port):
            log.warning(
                "server.host/server.port in fim.yaml are %s:%s; fim serve still listens on "
                "%s:%s until it is restarted",
                settings.host,
                settings.port,
                host,
                port,
            )
        if server_keys(settings) or settings.allow_open or is_loopback(host):
            return []
        return [
            problem_in_file(
                new.root,
                "fim.yaml",
                ("server", "api_keys"),
                f"server.api_keys: a reload cannot leave fim serve on {host} without an API "
                "key (none set, or each a ${VAR} that is empty); start would refuse this "
                "fim.yaml too",
                "set a key (a ${VAR} that is set), or set server.allow_open: true when a proxy "
                "in front authenticates; listening on 127.0.0.1 needs a restart",
            )
        ]

    return gate


def load_areas(modules: Sequence[str]) -> list[Area]:
    """The `AREA` of each module; a module without one is an error, never skipped."""
    areas = []
    for name in modules:
        area = getattr(importlib.import_module(name), "AREA", None)
        if not isinstance(area, Area):
            raise TypeError(f"route area module {name} has no AREA = fim.server.area.Area(...)")
        areas.append(area)
    return areas


def create_app(
    holder: SnapshotHolder, services: Services | None = None, areas: Sequence[str] = AREAS
) -> Starlette:
    """Build the ASGI app around a snapshot holder (the reloader swaps its content), from
    the route areas `areas` (module names)."""
    services = services or Services(
        root=holder.current.root,
        state_url=holder.current.project.state,
        providers=CAPABILITIES,
    )

    observe.enable_metrics()
    api = Api(holder, services)
    routes: list[BaseRoute] = []
    operations: dict[tuple[str, str], Op] = {}
    for area in load_areas(areas):
        routes += area.routes(api)
        for key, op in area.operations().items():
            if key in operations:
                raise TypeError(f"route area '{area.name}': {' '.join(key)} is already served")
            operations[key] = op
    # deferred: loading fim.observe.http costs a few ms
    from fim.observe.http import TraceContext

    middleware = [
        Middleware(TraceContext, trusted=_key_checks_out(holder)),
        Middleware(AccessLog),
        Middleware(Guard, holder=holder),
    ]
    middleware.insert(2, Middleware(ReloadedCors, holder=holder))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        """At shutdown, the background runs going in this process end `cancelled`
        (`fim.server.background.Going`; `fim serve` runs without lifespan events and
        stops them as it closes its services)."""
        try:
            yield
        finally:
            # deferred: the route modules loaded it already; app.py itself stays light
            from fim.server.background import stop_background

            await stop_background(api)

    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={Exception: _internal_error, HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.api = api
    app.state.operations = operations  # what fim.server.openapi documents
    return app
