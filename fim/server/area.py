"""What an HTTP route area is made of: its routes, each with its OpenAPI operation.

An area is one file in `fim.server.areas` holding `AREA = Area(...)`: its `Endpoint`s (path,
methods, the handler's name and the `Op` of each method: summary, tag, and the pydantic
models of its request and response bodies, from which `fim.server.openapi` generates the
document) and `handlers(api)`, which builds the handlers by name for one app.
`fim.server.app.AREAS` is the one list of area modules the app is assembled from.

A route that the document would list without an `Op` for each of its methods is a
`TypeError` when its area's module is imported, so an undocumented route never reaches a
server; only a `hidden` route (the development page and its files) needs none.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.routing import BaseRoute, Mount, Route

from fim.server.limits import admitting
from fim.server.queries import refusing_query
from fim.server.replies import error

if TYPE_CHECKING:
    from fim.server.api import Api

ANY_METHOD = ("GET", "POST", "DELETE")
"""What a route that takes every method (an ASGI app such as MCP's) is listed with."""


@dataclass(frozen=True)
class Op:
    """One operation of the OpenAPI document; the schemas come from the pydantic models."""

    summary: str
    tag: str
    ok: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    stream: str | None = None
    """When the body asks for `stream: true` (or the route always streams): what the
    events are."""
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    background: bool = False
    """The body may ask for `background: true`: 202 with a `BackgroundAccepted`."""
    runs: bool = False
    """Starts a run: counted against the caller's `server.key_limits` (`fim.server.limits`),
    a 429 over them."""


@dataclass(frozen=True)
class Endpoint:
    """One route: `ops` maps each method it serves to its operation."""

    path: str
    handler: str
    """The key of the handler in what the area's `handlers(api)` returns."""
    ops: Mapping[str, Op] = field(default_factory=dict)
    any_method: bool = False
    """An ASGI app answering every method (listed as `ANY_METHOD`)."""
    hidden: bool = False
    """Not part of the API (the page and its files): served, but not in the document."""
    mount: str | None = None
    """Mounted as a sub-app under this route name (static files) instead of a route."""
    extra_query: bool = False
    """Standard clients of the route add query parameters of their own (an OpenAI SDK's
    `default_query`, Azure's `api-version`; a probe's or a scraper's): they are ignored.
    Every other API route's method without a query model (`Op.query`) refuses any."""

    def route(self, handler: Any) -> BaseRoute:
        if self.mount is not None:
            return Mount(self.path, app=handler, name=self.mount)
        methods = None if self.any_method else list(self.ops) or None
        return Route(self.path, handler, methods=methods, include_in_schema=not self.hidden)

    def operations(self) -> dict[tuple[str, str], Op]:
        path = re.sub(r"{(\w+):\w+}", r"{\1}", self.path)  # OpenAPI says `{id}`
        return {(method, path): op for method, op in self.ops.items()}


NUL_REFUSED = "a NUL character (%00) is not allowed"


def storable_params(
    handler: Callable[[Request], Awaitable[Any]],
) -> Callable[[Request], Awaitable[Any]]:
    """`handler`, answering 400 naming the path or query parameter that holds a NUL
    (`/v1/sessions/s%00`, `?agent=a%00`). Such a value reaches the store as text (a run's,
    an approval's, a session's id; a usage filter): PostgreSQL refused it and the lookup
    was a 500 (attack-24); the store now keeps it as U+FFFD (`fim.store.schema.storable`),
    which names another row than the one asked for. Checked once here for every route."""

    async def checked(request: Request) -> Any:
        for name, value in (*request.path_params.items(), *request.query_params.multi_items()):
            if isinstance(value, str) and "\x00" in value:
                return error(400, f"{name}: {NUL_REFUSED}", param=name)
        return await handler(request)

    return checked


def _answers(handler: Any) -> bool:
    """A request handler (Starlette calls it with the request), not an ASGI app."""
    return inspect.isfunction(handler) or inspect.ismethod(handler)


def get(path: str, handler: str, op: Op, *, extra_query: bool = False) -> Endpoint:
    return Endpoint(path, handler, {"GET": op}, extra_query=extra_query)


def post(path: str, handler: str, op: Op, *, extra_query: bool = False) -> Endpoint:
    return Endpoint(path, handler, {"POST": op}, extra_query=extra_query)


def hidden(path: str, handler: str) -> Endpoint:
    return Endpoint(path, handler, hidden=True)


@dataclass(frozen=True)
class Area:
    """A group of routes declared in one file (see the module docstring)."""

    name: str
    endpoints: tuple[Endpoint, ...]
    handlers: Callable[[Api], Mapping[str, Any]]

    def __post_init__(self) -> None:
        for endpoint in self.endpoints:
            if not isinstance(endpoint.ops, Mapping):
                raise TypeError(
                    f"route area '{self.name}': {endpoint.path}: ops maps each method to its Op"
                )
            if endpoint.hidden or endpoint.mount is not None:
                continue
            methods = ANY_METHOD if endpoint.any_method else tuple(endpoint.ops) or ("GET",)
            missing = [m for m in methods if not isinstance(endpoint.ops.get(m), Op)]
            if missing:
                raise TypeError(
                    f"route area '{self.name}': {'/'.join(missing)} {endpoint.path} has no "
                    "OpenAPI operation (give it an Op: summary, tag and the pydantic models of "
                    "its bodies, or mark it hidden if it is not part of the API)"
                )

    def routes(self, api: Api) -> list[BaseRoute]:
        handlers = self.handlers(api)
        missing = [e.handler for e in self.endpoints if e.handler not in handlers]
        if missing:
            raise TypeError(f"route area '{self.name}' has no handler {', '.join(missing)}")
        routes = []
        for e in self.endpoints:
            handler = handlers[e.handler]
            if any(op.runs for op in e.ops.values()):
                handler = admitting(api, handler)
            if inspect.isfunction(handler) and not e.any_method and e.mount is None:
                handler = storable_params(handler)  # an ASGI app (MCP's) reads its own
            bare = [m for m, op in e.ops.items() if not op.query]
            if bare and not (e.hidden or e.extra_query) and _answers(handler):
                handler = refusing_query(handler, bare)  # an ASGI app (A2A's) reads its own
            routes.append(e.route(handler))
        return routes

    def operations(self) -> dict[tuple[str, str], Op]:
        found: dict[tuple[str, str], Op] = {}
        for endpoint in self.endpoints:
            found.update(endpoint.operations())
        return found


__all__ = ["ANY_METHOD", "Area", "Endpoint", "Op", "get", "hidden", "post", "storable_params"]
