"""Events -> OpenTelemetry spans, following the GenAI semantic conventions.

One consumer for every engine: it reads the event stream a run yields (react, dag,
workflows) and opens and closes spans from it, using the events' own timestamps. It is
imported only when tracing is configured (see `fim.observe.tracing_enabled`).

The spans themselves are built by `fim.observe.run_spans`; here a run or workflow gets
its `RunSpans` (the sampler asked once, at its root) and work in progress its trace
context (`current_span`, `inject`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from fim.observe.context import name_service
from fim.observe.run_spans import RunSpans
from fim.observe.scope import Dropped, trace_scope
from fim.observe.sdk import OpenSpan, flush, provider, shutdown, sink, tracer
from fim.observe.vcs import git_commit

log = logging.getLogger("fim.observe")

__all__ = [
    "current_span",
    "flush",
    "inject",
    "provider",
    "shutdown",
    "trace_run",
    "trace_workflow",
    "tracer",
]


def _parent(parent: RunSpans | Dropped | None, agent: str) -> SpanContext | None:
    if parent is not None:
        return parent.context_for(agent)
    # e.g. the W3C context of the incoming HTTP request
    context = trace.get_current_span().get_span_context()
    return context if context.is_valid else None


def _traced(
    name: str,
    agent: str,
    attributes: dict[str, Any],
    mask: Callable[[str], str] | None,
    capture: bool = True,
) -> RunSpans | Dropped:
    """What builds the spans of a run or workflow (`attributes`: no None values): the one
    place the sampler is asked (a run a dropped one starts is dropped too, as the SDK's
    parent-based samplers would decide, at no cost). The spans carry content only when the
    OpenTelemetry variable asks (`Sink.capture`) and `capture` (the run keeps it: fim.yaml's
    `capture_content: false` keeps it out of the spans too, attack-62 F1)."""
    scope = trace_scope.get()
    if isinstance(scope, Dropped):
        return Dropped(scope.root)
    found = sink()
    parent = _parent(scope, agent)
    context, sampled = found.root(name, parent, attributes)
    if not sampled:
        return Dropped(context)
    root = OpenSpan(name, context, parent, SpanKind.INTERNAL, time.time_ns(), attributes)
    spans = RunSpans(root, mask, found)
    spans.capture = found.capture and capture
    return spans


def current_span() -> Span:
    """The span work running now belongs to: the tool call or node of the innermost traced
    run, else OpenTelemetry's current span (an incoming request's)."""
    scope = trace_scope.get()
    if scope is not None:
        return NonRecordingSpan(scope.context_for(""))
    return trace.get_current_span()


W3C = TraceContextTextMapPropagator()
"""The one propagator of trace context in and out: W3C `traceparent` (and fim's own
`tracestate`), never baggage (`fim.observe.http` reads callers' with it too)."""


def inject(headers: Any) -> None:
    """Write the W3C `traceparent` of `current_span()` into `headers` (and a `tracestate`
    only fim's own sampler set: a caller's is dropped where it comes in,
    `fim.observe.http`). Never baggage, nor what other propagators `OTEL_PROPAGATORS`
    names: connectors and MCP servers are told which trace a call belongs to, nothing a
    caller claimed about itself."""
    W3C.inject(headers, context=trace.set_span_in_context(current_span(), Context()))


def _mask_of(snapshot: Any) -> Callable[[str], str] | None:
    """The snapshot's masking (`Snapshot.mask`), as its masker's own method: called for
    every model-written name and id a span records, one call less each time."""
    masker = getattr(snapshot, "masker", None)
    return getattr(masker, "text", None) or getattr(snapshot, "mask", None)


_last: tuple[Any, dict[str, Any]] | None = None


def _of_snapshot(snapshot: Any) -> dict[str, Any]:
    """The attributes every run of `snapshot` shares (project, version, commit), made
    once per snapshot: a server runs one snapshot until it reloads."""
    global _last
    last = _last
    if last is not None and last[0] is snapshot:
        return last[1]
    project = getattr(getattr(snapshot, "project", None), "name", None)
    name_service(project)  # a one-shot command's provider is made after this
    version = getattr(snapshot, "version", None) or None
    made = {
        "fim.project": project,
        "fim.snapshot.version": version,
        "vcs.ref.head.revision": git_commit(getattr(snapshot, "root", None), version or "") or None,
    }
    made = {k: v for k, v in made.items() if v is not None}
    _last = (snapshot, made)
    return made


def trace_run(
    agent: str,
    run_id: str,
    snapshot: Any,
    depth: int = 0,
    mask: Callable[[str], str] | None = None,
    session: str | None = None,
    owner: str = "",
    capture: bool = True,
) -> RunSpans | Dropped:
    """The watch (`fim.observe.Watch`) building one agent run's spans: the session it
    continues as `gen_ai.conversation.id` and the caller's key hash as `fim.tenant`, so
    a backend finds the runs of the session or tenant that hit its budget."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "fim.run_id": run_id,
        "fim.depth": depth,
        **_of_snapshot(snapshot),
    }
    if session:
        attributes["gen_ai.conversation.id"] = session[:200]
    if owner:
        attributes["fim.tenant"] = owner
    return _traced(
        f"invoke_agent {agent}",
        agent,
        attributes,
        mask or _mask_of(snapshot),
        capture,
    )


def trace_workflow(*, workflow: str, run_id: str, snapshot: Any) -> RunSpans | Dropped:
    """The watch building one workflow run's spans."""
    attributes = {"fim.workflow": workflow, "fim.run_id": run_id, **_of_snapshot(snapshot)}
    return _traced(f"workflow {workflow}", workflow, attributes, _mask_of(snapshot))
