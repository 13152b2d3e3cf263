"""Observability: OpenTelemetry traces built from fim's event stream.

Every engine already yields one ordered event stream per run; `observe_run` and
`observe_workflow` wrap that stream where the surfaces consume it, and turn it into spans.
Nothing here imports `opentelemetry` unless tracing is configured through the standard
`OTEL_EXPORTER_OTLP_*` environment variables, so a run with tracing off pays one cached
boolean check and creates no span.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fim.observe.context import current_call as current_call
from fim.observe.context import current_node as current_node

if TYPE_CHECKING:
    from fim.events import Event

_enabled: bool | None = None
_metrics = False


def tracing_enabled() -> bool:
    """Whether spans are exported: an OTLP endpoint is set, the SDK is not disabled and
    the traces exporter is not `none`. Read once per process (`reset()` re-reads)."""
    global _enabled
    if _enabled is None:
        env = os.environ
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        _enabled = bool(
            endpoint
            and env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"
            and env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none"
        )
    return _enabled


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
    """Forget the cached decision and shut the exporter down (tests, benchmarks)."""
    global _enabled
    _enabled = None

    tracing = sys.modules.get("fim.observe.tracing")
    if tracing is not None:
        tracing.shutdown()


def observe_run(
    events: AsyncIterator[Event],
    *,
    agent: str,
    run_id: str,
    snapshot: Any,
    depth: int = 0,
    mask: Callable[[str], str] | None = None,
) -> AsyncIterator[Event]:
    """The events of one agent run, unchanged; spans and metrics on the side when on."""
    if _metrics:
        # deferred: loading prometheus_client costs hundreds of ms
        from fim.observe.metrics import count_run

        events = count_run(events, agent)
    if not tracing_enabled():
        return events
    # deferred: loading fim.events costs hundreds of ms
    from fim.observe.tracing import trace_run

    return trace_run(events, agent=agent, run_id=run_id, snapshot=snapshot, depth=depth, mask=mask)


def observe_workflow(
    events: AsyncGenerator[Event, None], *, workflow: str, run_id: str, snapshot: Any
) -> AsyncGenerator[Event, None]:
    """The events of one workflow run, unchanged; spans on the side when tracing is on."""
    if not tracing_enabled():
        return events
    # deferred: loading fim.events costs hundreds of ms
    from fim.observe.tracing import trace_workflow

    return trace_workflow(events, workflow=workflow, run_id=run_id, snapshot=snapshot)
