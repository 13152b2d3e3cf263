"""W3C trace context over HTTP: read from incoming requests, written into outgoing ones.

Both are no-ops (and import nothing) unless tracing is configured.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

from fim.observe import tracing_enabled

EXCLUDED_ENV = "OTEL_PYTHON_EXCLUDED_URLS"
DEFAULT_EXCLUDED = r"^/healthz$,^/readyz$,^/metrics$"
"""Requests not traced unless `OTEL_PYTHON_EXCLUDED_URLS` says otherwise: a probe every
10 s and a scrape every 15 s filled the trace list with one-span traces."""


PAGE_READS = ("/", "/docs", "/favicon.ico", "/openapi.json")
"""Paths of the dev page (and its API reference) that only read, besides `/static/` and
the GETs under `/v1/`."""


def page_read(scope: Any) -> bool:
    """A request that only reads and did not ask to be traced: a GET or HEAD of the dev
    page, its assets or an API route under `/v1/` (`GET /v1/runs/{id}`, the status
    stream, the lists the page polls), with no `traceparent`. Not traced by default: in
    ten minutes of the dev page, 168 of 175 traces a backend received were its own
    polling, and the runs were buried under them (newcomer-53 #8). A run, and any POST,
    is traced."""
    if scope.get("method") not in ("GET", "HEAD"):
        return False
    if any(name == b"traceparent" for name, _value in scope.get("headers", ())):
        return False
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root):  # behind a proxy's prefix
        path = path[len(root) :] or "/"
    return path in PAGE_READS or path.startswith(("/static/", "/v1/"))


def excluded_paths() -> list[re.Pattern[str]]:
    """`OTEL_PYTHON_EXCLUDED_URLS` (comma-separated regular expressions, searched in the
    path as the Python instrumentations search the URL), else `DEFAULT_EXCLUDED`; an empty
    value traces every request."""
    raw = os.environ.get(EXCLUDED_ENV)
    raw = DEFAULT_EXCLUDED if raw is None else raw
    return [re.compile(part.strip()) for part in raw.split(",") if part.strip()]


def route_of(scope: Any, routes: dict[Any, list[Any]]) -> str | None:
    """The route template a request was routed to (`/v1/runs/{run_id}`), from the endpoint
    the router wrote into the request's scope, or for a request answered before routing
    (a 401) the route it would have reached; None when no route matches. `routes` maps an
    endpoint to its routes (filled here, once per endpoint)."""
    app = scope.get("app")
    if app is None:
        return None
    endpoint = scope.get("endpoint")
    found: list[Any] | None
    if endpoint is None:
        found = list(getattr(app, "routes", ()))
    else:
        found = routes.get(endpoint)
        if found is None:
            found = routes[endpoint] = [
                r for r in getattr(app, "routes", ()) if getattr(r, "endpoint", None) is endpoint
            ]
        if len(found) == 1:
            return str(found[0].path)
    # deferred: starlette is loaded by the app this middleware wraps
    from starlette.routing import Match

    for route in found:  # an endpoint serving several paths: the one that matches
        if hasattr(route, "endpoint") and route.matches(scope)[0] is Match.FULL:
            return str(route.path)
    return None


class TraceContext:
    """ASGI middleware: a SERVER span per request, made current so the runs the request
    starts are its children (built like fim's other spans, `fim.observe.sdk`; the sampler
    decides here first).

    The span continues the caller's W3C `traceparent` only when `trusted(scope)` says the
    caller is who it claims (`fim serve`: its key checks out): a caller with no key would
    otherwise choose the trace its span lands in and force it sampled. Anyone else's
    request is a new trace of fim's, which the sampler decides. What else a caller sends
    is not fim's to pass on: `baggage` is not read at all (it names a tenant or a user as
    the caller pleases, and services behind connectors and MCP servers may act on it) and
    the caller's `tracestate` is dropped (vendor data fim cannot vouch for)."""

    def __init__(self, app: Any, *, trusted: Callable[[Any], bool]) -> None:
        self.app = app
        self.trusted = trusted
        self.excluded = excluded_paths()
        self.quiet_reads = os.environ.get(EXCLUDED_ENV) is None
        """`page_read` requests are left out unless `OTEL_PYTHON_EXCLUDED_URLS` is set:
        then it alone says what is (empty: every request is traced)."""
        self.routes: dict[Any, list[Any]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or not tracing_enabled()
            or any(p.search(scope.get("path", "")) for p in self.excluded)
            or (self.quiet_reads and page_read(scope))
        ):
            await self.app(scope, receive, send)
            return
        # deferred: loading opentelemetry costs a few ms
        from opentelemetry import context, trace
        from opentelemetry.trace import NonRecordingSpan, SpanKind

        # deferred: loading opentelemetry's SDK costs tens of ms, only when tracing is on
        from fim.observe.sdk import OpenSpan, sink

        caller = self._caller(scope)
        route = scope.get("path", "")
        name = f"{scope['method']} {route}"
        attributes = {"http.request.method": scope["method"], "url.path": route}
        found = sink()
        made, sampled = found.root(name, caller, attributes)
        span = OpenSpan(
            name,
            made,
            caller if caller.is_valid else None,
            SpanKind.SERVER,
            time.time_ns(),
            attributes,
        )
        # a context of the span alone: nothing else the caller sent goes on from here
        token = context.attach(trace.set_span_in_context(NonRecordingSpan(made), context.Context()))

        # W3C Trace Context level 2: which trace the request became, for the caller
        answer = (b"traceresponse", f"00-{made.trace_id:032x}-{made.span_id:016x}-"
                  f"{int(made.trace_flags) & 0xFF:02x}".encode())  # fmt: skip

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                span.attributes["http.response.status_code"] = message["status"]
                if message["status"] >= 500:
                    span.error("")
                message = {**message, "headers": [*message.get("headers", ()), answer]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            context.detach(token)
            if sampled:
                # named after the route template, known once routed: a raw path named
                # every run id as an operation of its own
                template = route_of(scope, self.routes)
                span.name = f"{scope['method']} {template}" if template else scope["method"]
                if template:
                    span.attributes["http.route"] = template
                found.emit(span, time.time_ns())

    def _caller(self, scope: Any) -> Any:
        """The caller's span context, without its `tracestate`, when it sent a valid
        `traceparent` and is `trusted`; else the invalid context (a new trace)."""
        # deferred: loading opentelemetry costs a few ms
        from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanContext, get_current_span

        from fim.observe.tracing import W3C

        sent = next((v for k, v in scope["headers"] if k == b"traceparent"), None)
        if sent is None:  # ASGI header names are lower case
            return INVALID_SPAN_CONTEXT
        carrier = {"traceparent": sent.decode("latin-1")}
        extracted = W3C.extract(carrier)
        found = get_current_span(extracted).get_span_context()
        if not found.is_valid or not self.trusted(scope):
            return INVALID_SPAN_CONTEXT
        return SpanContext(found.trace_id, found.span_id, True, found.trace_flags)


async def inject_trace_headers(request: Any) -> None:
    """httpx request hook: add `traceparent` for the tool call (or run) now running, so a
    connector's or MCP server's own spans join the run's trace."""
    if not tracing_enabled():
        return
    # deferred: loading fim.events costs hundreds of ms
    from fim.observe.tracing import inject

    inject(request.headers)


def traced(client: Any) -> Any:
    """Add the trace-context hook to an httpx client (returned for chaining)."""
    hooks = client.event_hooks
    client.event_hooks = {**hooks, "request": [*hooks.get("request", []), inject_trace_headers]}
    return client
