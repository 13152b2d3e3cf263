"""W3C trace context over HTTP: read from incoming requests, written into outgoing ones.

Both are no-ops (and import nothing) unless tracing is configured.
"""

from __future__ import annotations

import time
from typing import Any

from fim.observe import tracing_enabled


class TraceContext:
    """ASGI middleware: a SERVER span per request, child of the caller's `traceparent`,
    made current so the runs the request starts are its children (built like fim's other
    spans, `fim.observe.sdk`; the sampler decides here first)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing_enabled():
            await self.app(scope, receive, send)
            return
        # deferred: loading opentelemetry costs a few ms
        from opentelemetry import context, propagate, trace
        from opentelemetry.trace import NonRecordingSpan, SpanKind

        # deferred: loading opentelemetry's SDK costs tens of ms, only when tracing is on
        from fim.observe.sdk import OpenSpan, sink

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        parent = propagate.extract(carrier)
        caller = trace.get_current_span(parent).get_span_context()
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
        token = context.attach(trace.set_span_in_context(NonRecordingSpan(made), parent))

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
