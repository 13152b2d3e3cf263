"""W3C trace context over HTTP: read from incoming requests, written into outgoing ones.

Both are no-ops (and import nothing) unless tracing is configured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fim.observe import tracing_enabled


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

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing_enabled():
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

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                span.attributes["http.response.status_code"] = message["status"]
                if message["status"] >= 500:
                    span.error("")
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            context.detach(token)
            if sampled:
                found.emit(span, time.time_ns())

    def _caller(self, scope: Any) -> Any:
        """The caller's span context, without its `tracestate`, when it sent a valid
        `traceparent` and is `trusted`; else the invalid context (a new trace)."""
        # deferred: loading opentelemetry costs a few ms
        from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanContext, get_current_span
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        sent = next((v for k, v in scope["headers"] if k == b"traceparent"), None)
        if sent is None:  # ASGI header names are lower case
            return INVALID_SPAN_CONTEXT
        carrier = {"traceparent": sent.decode("latin-1")}
        extracted = TraceContextTextMapPropagator().extract(carrier)
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
