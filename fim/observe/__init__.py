"""Observability: OpenTelemetry traces built from fim's event stream.

Every engine already yields one ordered event stream per run; `watch_run` (read inline
by `fim.run.agent`) and `observe_workflow` turn that stream into spans and metrics.
Nothing here imports `opentelemetry` unless tracing is configured through the standard
`OTEL_EXPORTER_OTLP_*` environment variables, so a run with tracing off pays one cached
boolean check and creates no span.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Protocol

from fim.observe import context
from fim.observe.context import current_call as current_call
from fim.observe.context import current_node as current_node
from fim.observe.context import name_service as name_service

if TYPE_CHECKING:
    from fim.events import Event

_enabled: bool | None = None
_metrics = False


def tracing_enabled() -> bool:
    """Whether spans are exported: the SDK is not disabled and `OTEL_TRACES_EXPORTER`
    names an exporter, `console` (spans printed on stderr, nothing else needed) or `otlp`
    (the default) with an OTLP endpoint set. Read once per process (`reset()` re-reads)."""
    global _enabled
    if _enabled is None:
        env = os.environ
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        raw = env.get("OTEL_TRACES_EXPORTER", "") or "otlp"
        names = {part.strip().lower() for part in raw.split(",") if part.strip()}
        unknown = sorted(names - {"otlp", "console", "none"})
        if unknown:  # one line, not a silent "off": the standard names fim knows
            _log().warning(
                "OTEL_TRACES_EXPORTER=%s: fim exports to otlp, console or none; tracing is off",
                raw,
            )
        _enabled = bool(
            not unknown
            and env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"
            and ("console" in names or ("otlp" in names and endpoint))
        )
    return _enabled


def _log() -> Any:
    # deferred: logging is loaded by the time anything logs; this module stays light
    import logging

    return logging.getLogger("fim.observe")


def warm(service: str | None = None) -> None:
    """For a process that serves `service` (the project's name, the default `service.name`):
    build the tracer provider now when tracing is on, so the
    SDK it loads settles with the rest of the start-up heap (`fim.server.settle_heap`: left
    in the cyclic collector's generations, it made every full collection walk it) and the
    first run does not wait for it."""
    if tracing_enabled():
        # deferred: loading opentelemetry costs tens of ms, only when tracing is on
        from fim.observe.tracing import tracer

        tracer()


def enable_metrics() -> None:
    """Count every run from now on in Prometheus metrics (`fim serve` turns this on)."""
    global _metrics
    _metrics = True


def record_reload(ok: bool) -> None:
    """A snapshot reload succeeded or was rejected (counted when metrics are on)."""
    if _metrics:
        # deferred: loading prometheus_client costs hundreds of ms
        from fim.observe.metrics import METRICS

        METRICS.reloads.labels("ok" if ok else "failed").inc()


def reset() -> None:
    """Forget the cached decision and the service name, and shut the exporter down (tests,
    benchmarks)."""
    global _enabled
    _enabled = None
    context.service_name = None

    sdk = sys.modules.get("fim.observe.sdk")
    if sdk is not None:
        sdk.shutdown()


class Watch(Protocol):
    """What observes one run: `on` for each of its events, read inline where the run's own
    loop reads them (a generator layer per observer cost more than the spans it built);
    entered before the first event and exited after the last one, with the exception that
    ended the run (`GeneratorExit` for a stream its reader closed early). Never swallows it,
    and never raises one of its own: a bug in an observer, or a number it cannot take (an
    endpoint's negative token count), must not fail the run it watches, so each guards
    its own work and logs its first failure (`RunSpans.read`, `RunCounter.on`)."""

    @property
    def trace_id(self) -> str | None:
        """The run's trace id when its spans are exported, else None."""

    def on(self, event: Event) -> None: ...

    def __enter__(self) -> object: ...

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None: ...


class _Both:
    """Metrics and a trace, both on (`fim serve` with an OTLP endpoint)."""

    def __init__(self, first: Watch, second: Watch) -> None:
        self.first, self.second = first, second

    @property
    def trace_id(self) -> str | None:
        return self.first.trace_id or self.second.trace_id

    def on(self, event: Event) -> None:
        self.first.on(event)
        self.second.on(event)

    def __enter__(self) -> _Both:
        self.first.__enter__()
        try:
            self.second.__enter__()
        except BaseException as exc:  # the first was entered: it sees the run end here
            self.first.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            self.second.__exit__(kind, exc, tb)
        finally:
            self.first.__exit__(kind, exc, tb)


def count_refused(agent: str) -> None:
    """A run of `agent` refused before it started (its plan raised: a connector whose
    `${VAR}` is unset, a skill that failed to load) is an `error` of `fim_runs_total` when
    metrics are on, as a run that failed later is (newcomer-52 #5)."""
    if not _metrics:
        return
    # deferred: loading prometheus_client costs hundreds of ms
    from fim.observe.metrics import METRICS

    try:
        METRICS.c_runs(agent, "error").inc()
    except Exception:  # counting never fails a run
        _log().debug("could not count the refused run of %s", agent)


def watch_run(
    *,
    agent: str,
    run_id: str,
    snapshot: Any,
    depth: int = 0,
    mask: Callable[[str], str] | None = None,
    session: str | None = None,
    owner: str = "",
    capture: bool = True,
) -> Watch | None:
    """What observes one agent run (spans, metrics), or None when nothing does; `session`
    and `owner` (the caller's key hash) go on its span. Its spans carry the run's content
    only when `capture` (the run keeps it: `fim.run.capture`) and the OpenTelemetry
    variable asks for it."""
    counted: Watch | None = None
    if _metrics:
        # deferred: loading prometheus_client costs hundreds of ms
        from fim.observe.metrics import RunCounter

        counted = RunCounter(agent)
    if not tracing_enabled():
        return counted
    traced = _tracer_of_runs()(agent, run_id, snapshot, depth, mask, session, owner, capture)
    return traced if counted is None else _Both(counted, traced)


_trace_run: Callable[..., Watch] | None = None


def _tracer_of_runs() -> Callable[..., Watch]:
    """`fim.observe.tracing.trace_run`, imported by the first traced run (an import
    statement run per run cost more than a span attribute)."""
    global _trace_run
    if _trace_run is None:
        # deferred: loading opentelemetry costs tens of ms, only when tracing is on
        from fim.observe.tracing import trace_run

        _trace_run = trace_run
    return _trace_run


async def watched(events: AsyncIterator[Event], watch: Watch) -> AsyncGenerator[Event, None]:
    """`events` unchanged, each shown to `watch` first (a stream no loop of fim's reads
    inline: a workflow's, a replayed one)."""
    with watch:
        async with aclosing(events) as stream:  # type: ignore[type-var]
            async for event in stream:
                watch.on(event)
                yield event


def observe_workflow(
    events: AsyncGenerator[Event, None], *, workflow: str, run_id: str, snapshot: Any
) -> AsyncGenerator[Event, None]:
    """The events of one workflow run, unchanged; spans on the side when tracing is on."""
    if not tracing_enabled():
        return events
    # deferred: loading fim.events costs hundreds of ms
    from fim.observe.tracing import trace_workflow

    return watched(events, trace_workflow(workflow=workflow, run_id=run_id, snapshot=snapshot))
