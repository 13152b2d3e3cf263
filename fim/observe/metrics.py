"""Prometheus metrics from the event stream, served at `GET /metrics` by `fim serve`.

The same events the traces come from feed counters and histograms in a registry of fim's
own (not the global one, so tests and several apps in one process do not collide). Label
values a model writes (tool names) are capped: a hostile model cannot blow up the series
count.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Generic, TypeVar

from fim.events import Event

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        generate_latest,
    )

    INSTALLED = True
except ModuleNotFoundError:  # a base install: prometheus-client comes with the [otel] extra
    INSTALLED = False

MISSING = "metrics need the prometheus-client package (pip install -e '.[otel]' in fim's checkout)"

MAX_TOOL_LABELS = 200
M = TypeVar("M", "Counter", "Gauge", "Histogram")  # names: they may not be installed
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Children(Generic[M]):
    """A labelled metric's children, remembered by their label values: prometheus_client's
    `labels()` checks, converts and locks on every call, and a served run looks up about
    fifteen of them. Holds no child the metric does not hold itself."""

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs = Counter("fim_runs", "Finished runs", ["agent", "outcome"], registry=r)
        self.run_seconds = Histogram(
            "fim_run_duration_seconds", "Run latency", ["agent"], buckets=_LATENCY, registry=r
        )
        self.model_seconds = Histogram(
            "fim_model_call_duration_seconds",
            "Model call latency",
            ["model"],
            buckets=_LATENCY,
            registry=r,
        )
        self.tokens = Counter(
            "fim_tokens", "Model tokens", ["agent", "model", "direction"], registry=r
        )
        self.cost = Counter("fim_cost_usd", "Model cost in USD", ["agent", "model"], registry=r)
        self.tool_calls = Counter(
            "fim_tool_calls", "Tool calls", ["agent", "tool", "outcome"], registry=r
        )
        self.hook_blocks = Counter(
            "fim_hook_blocks",
            "Calls or runs blocked by a hook",
            ["agent", "hook", "point"],
            registry=r,
        )
        self.reloads = Counter("fim_reloads", "Snapshot reloads", ["outcome"], registry=r)
        self.active = Gauge("fim_active_runs", "Runs in progress", ["agent"], registry=r)
        self._tools: set[str] = set()
        self._lock = threading.Lock()
        self.c_runs, self.c_run_seconds = Children(self.runs), Children(self.run_seconds)
        self.c_model_seconds, self.c_tokens = Children(self.model_seconds), Children(self.tokens)
        self.c_cost, self.c_tool_calls = Children(self.cost), Children(self.tool_calls)
        self.c_hook_blocks, self.c_active = Children(self.hook_blocks), Children(self.active)

    def tool_label(self, name: str) -> str:
        """A tool name as a label value: the first MAX_TOOL_LABELS names, then `other`."""
        name = name[:64]
        with self._lock:
            if name in self._tools:
                return name
            if len(self._tools) < MAX_TOOL_LABELS:
                self._tools.add(name)
                return name
        return "other"

    def on(self, agent: str, event: Event, blocked: set[str]) -> None:
        kind = event.type
        if kind == "llm_call":
            e: Any = event
            model = e.request_model or e.model
            self.c_model_seconds(model).observe(e.duration_ms / 1000)
            self.c_tokens(agent, model, "input").inc(e.usage.prompt_tokens)
            self.c_tokens(agent, model, "output").inc(e.usage.completion_tokens)
            if e.usage.cost:
                self.c_cost(agent, model).inc(e.usage.cost)
        elif kind == "hook":
            e = event
            if e.decision == "block":
                self.c_hook_blocks(agent, e.hook[:64], e.point).inc()
                if e.call_id:
                    blocked.add(e.call_id)
        elif kind == "tool_result":
            e = event
            outcome = "blocked" if e.call_id in blocked else "error" if e.is_error else "ok"
            self.c_tool_calls(agent, self.tool_label(e.name), outcome).inc()
        elif kind == "run_finished":
            e = event
            self.c_runs(agent, e.status).inc()
            self.c_run_seconds(agent).observe(e.duration_ms / 1000)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsUnavailable(RuntimeError):
    """Reading the metrics on an install without prometheus-client, outside a server."""


class _Nothing:
    """Stands in for the metrics without prometheus-client: every counter, child and
    observation is this object and does nothing, so runs under `fim serve` still work;
    only reading the metrics fails, with what to install."""

    def __getattr__(self, name: str) -> _Nothing:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Nothing:
        return self

    def exposition(self) -> tuple[bytes, str]:
        raise _unavailable()


def _unavailable() -> Exception:
    """Starlette's HTTPException 501, which `fim serve` answers as an error of OpenAI's
    shape naming what to install (fim.server.openai_errors.http_error) instead of a 500
    with a traceback in its log; the plain error where starlette is missing."""
    try:
        # deferred: starlette is the server's; this module is also used without one
        from starlette.exceptions import HTTPException
    except ModuleNotFoundError:  # pragma: no cover - starlette is a base dependency
        return MetricsUnavailable(MISSING)
    return HTTPException(501, MISSING)


METRICS: Metrics = Metrics() if INSTALLED else _Nothing()  # type: ignore[assignment]


class RunCounter:
    """Count one run's events; a run that ends without `run_finished` (an exception, a
    cancelled client) counts as `cancelled` or `error`. A `fim.observe.Watch`."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.blocked: set[str] = set()
        self.finished = False
        self.started = 0.0

    def __enter__(self) -> RunCounter:
        METRICS.c_active(self.agent).inc()
        self.started = time.perf_counter()
        return self

    def on(self, event: Event) -> None:
        METRICS.on(self.agent, event, self.blocked)
        if event.type == "run_finished":
            self.finished = True

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        m, agent = METRICS, self.agent
        m.c_active(agent).dec()
        if self.finished:
            return
        cancelled = isinstance(exc, GeneratorExit | asyncio.CancelledError)
        m.c_runs(agent, "cancelled" if cancelled else "error").inc()
        m.c_run_seconds(agent).observe(time.perf_counter() - self.started)
