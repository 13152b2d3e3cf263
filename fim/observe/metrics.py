"""Prometheus metrics from the event stream, served at `GET /metrics` by `fim serve`.

The same events the traces come from feed counters and histograms in a registry of fim's
own (not the global one, so tests and several apps in one process do not collide). Label
values a model writes (tool names) are capped: a hostile model cannot blow up the series
count. Counting never fails a run (`RunCounter`).

Under `fim serve --workers N` each worker writes its metrics to files in a folder the
parent made (`PROMETHEUS_MULTIPROC_DIR`, `fim.server.workers`), and a scrape, whichever
worker takes it, reads them all (`MultiProcessCollector`): counters are the sum over the
workers, `fim_active_runs` the sum over the live ones.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any, Generic, TypeVar

from fim.events import Event
from fim.types import NO_SUCH_TOOL, NOT_RUN

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        generate_latest,
        values,
    )
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.multiprocess import MultiProcessCollector

    INSTALLED = True
except ModuleNotFoundError:  # a base install: prometheus-client comes with the [otel] extra
    INSTALLED = False

MISSING = "metrics need the prometheus-client package (pip install -e '.[otel]' in fim's checkout)"

MAX_TOOL_LABELS = 200
UNKNOWN_TOOL = "unknown"
"""The one label of every tool name the run's agent does not have."""
_REFUSED = (NO_SUCH_TOOL, NOT_RUN)
"""How the result of a call the engine refused by its name begins: a name the model made
up (`fim.tools.registry.ToolRegistry.check`) or a call past a turn's limit
(`fim.engines.tool_turn`), whose name may be made up too. Neither takes a label slot."""

log = logging.getLogger("fim.observe")
BUDGET_EXCEEDED = "budget_exceeded"
"""The outcome of a run a budget stopped (its status is `error`): an alert on budgets is
not one on failures."""
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
            ["agent", "model"],
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
        self.tool_seconds = Histogram(
            "fim_tool_call_duration_seconds",
            "Tool call latency",
            ["agent", "tool"],
            buckets=_LATENCY,
            registry=r,
        )
        self.hook_blocks = Counter(
            "fim_hook_blocks",
            "Calls or runs blocked by a hook",
            ["agent", "hook", "point"],
            registry=r,
        )
        self.hook_failures = Counter(  # not a policy's block: the hook could not decide
            "fim_hook_failures",
            "Calls or runs blocked because a hook failed to run (fail closed)",
            ["agent", "hook", "point"],
            registry=r,
        )
        self.reloads = Counter("fim_reloads", "Snapshot reloads", ["outcome"], registry=r)
        self.active = Gauge(
            "fim_active_runs",
            "Runs in progress",
            ["agent"],
            registry=r,
            multiprocess_mode="livesum",  # --workers: the live workers' runs, summed
        )
        self._tools: set[str] = set()
        self._lock = threading.Lock()
        self.c_runs, self.c_run_seconds = Children(self.runs), Children(self.run_seconds)
        self.c_model_seconds, self.c_tokens = Children(self.model_seconds), Children(self.tokens)
        self.c_cost, self.c_tool_calls = Children(self.cost), Children(self.tool_calls)
        self.c_hook_blocks, self.c_active = Children(self.hook_blocks), Children(self.active)
        self.c_tool_seconds = Children(self.tool_seconds)
        self.c_hook_failures = Children(self.hook_failures)

    def tool_label(self, name: str, real: bool = True) -> str:
        """A tool name as a label value: the first MAX_TOOL_LABELS names of real tools,
        then `other`. A name that is not `real` (no tool of the run's agent: a model made
        it up) is `unknown` unless a real tool already holds it: made-up names, which a
        model writes as many as it likes, would otherwise fill the slots for good and
        every real tool after them would be `other`."""
        name = name[:64]
        with self._lock:
            if name in self._tools:
                return name
            if not real:
                return UNKNOWN_TOOL
            if len(self._tools) < MAX_TOOL_LABELS:
                self._tools.add(name)
                return name
        return "other"

    def on(
        self, agent: str, event: Event, blocked: set[str], run: RunCounter | None = None
    ) -> None:
        """Count one event of a run: `blocked` keeps the calls a hook blocked, `run`
        whether a budget stopped it (a later event's label depends on both)."""
        kind = event.type
        if kind == "llm_call":
            e: Any = event
            model = e.request_model or e.model
            self.c_model_seconds(agent, model).observe(e.duration_ms / 1000)
            usage = e.usage
            # an endpoint's own numbers: a negative one (which a counter refuses with an
            # exception) counts nothing
            self.c_tokens(agent, model, "input").inc(max(usage.prompt_tokens, 0))
            self.c_tokens(agent, model, "output").inc(max(usage.completion_tokens, 0))
            if usage.cost and usage.cost > 0:
                self.c_cost(agent, model).inc(usage.cost)
        elif kind == "hook":
            e = event
            if e.decision == "block":
                counted = self.c_hook_failures if e.failed else self.c_hook_blocks
                counted(agent, e.hook[:64], e.point).inc()
                if e.call_id:
                    blocked.add(e.call_id)
        elif kind == "tool_result":
            e = event
            outcome = "blocked" if e.call_id in blocked else "error" if e.is_error else "ok"
            real = not (e.is_error and e.content.startswith(_REFUSED))
            tool = self.tool_label(e.name, real)
            self.c_tool_calls(agent, tool, outcome).inc()
            if outcome != "blocked":  # a blocked call never ran: no latency of the tool's
                self.c_tool_seconds(agent, tool).observe(max(e.duration_ms, 0.0) / 1000)
        elif kind == "error":
            e = event
            if run is not None and e.kind == BUDGET_EXCEEDED:
                run.budget = True
        elif kind == "run_finished":
            e = event
            stopped = run is not None and run.budget and e.status == "error"
            status = BUDGET_EXCEEDED if stopped else e.status
            self.c_runs(agent, status).inc()
            self.c_run_seconds(agent).observe(e.duration_ms / 1000)

    def exposition(self) -> tuple[bytes, str]:
        folder = shared_folder()
        if folder is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        every = CollectorRegistry()  # every worker's files, this one's included
        MultiProcessCollector(every, path=folder)  # type: ignore[no-untyped-call]
        return generate_latest(every), CONTENT_TYPE_LATEST


class WorkerMetrics:
    """A `fim worker`'s metrics (`--metrics-port`), in a registry of their own: the jobs it
    runs now and how each ended (`fim.workflows.worker_watch.OUTCOMES`), and the jobs of
    dead workers it handed back to the queue."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.running = Gauge("fim_worker_jobs_running", "Jobs this worker runs now", registry=r)
        self.jobs = Counter(
            "fim_worker_jobs",
            "Jobs this worker ended, by outcome (ok, failed, skew, cancelled, paused, retried)",
            ["outcome"],
            registry=r,
        )
        self.stalled_requeued = Counter(
            "fim_worker_stalled_jobs_requeued",
            "Jobs of workers whose heartbeat stopped that this worker put back in the queue",
            registry=r,
        )

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def queue_exposition(counts: dict[str, int]) -> bytes:
    """`fim_queue_jobs{status}`, the job queue's runs waiting (`todo`) and running
    (`doing`) as counted at this scrape, in Prometheus text: appended to the server's
    exposition (a gauge read per scrape, never stored, so `--workers N` adds nothing up)."""
    registry = CollectorRegistry()

    class _Queue:
        def collect(self) -> Any:
            family = GaugeMetricFamily(
                "fim_queue_jobs", "Background runs in the job queue, by status", labels=["status"]
            )
            for status, n in sorted(counts.items()):
                family.add_metric([status], n)
            yield family

    registry.register(_Queue())
    return generate_latest(registry)


def info_exposition(snapshot: str, commit: str, version: str) -> bytes:
    """`fim_snapshot_info{snapshot,commit} 1` for the snapshot served now (only it: read
    per scrape, never stored, so a reload leaves no series of the old one behind) and
    `fim_build_info{version} 1`, fim's version: which commit is live, from the metrics, as
    Prometheus's `*_info` convention has it (newcomer-52 #8)."""
    registry = CollectorRegistry()

    class _Info:
        def collect(self) -> Any:
            served = GaugeMetricFamily(
                "fim_snapshot_info",
                "The snapshot served (its version, and the git commit it was built from)",
                labels=["snapshot", "commit"],
            )
            served.add_metric([snapshot, commit], 1)
            yield served
            build = GaugeMetricFamily("fim_build_info", "fim's version", labels=["version"])
            build.add_metric([version], 1)
            yield build

    registry.register(_Info())
    return generate_latest(registry)


def shared_folder() -> str | None:
    """The folder of multiprocess mode when this process counts in it, else None.
    prometheus_client picks file-backed values when it is first imported with
    `PROMETHEUS_MULTIPROC_DIR` set; the scrape reads the files only then (a variable set
    later, in a process counting in memory, would hide this process's own counts)."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder or not getattr(values.ValueClass, "_multiprocess", False):
        return None
    return folder


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


_logged = False


def _failed() -> None:
    """Log the first failure to count an event, with its traceback; later ones are not
    logged (a failing event kind would otherwise write a traceback per run)."""
    global _logged
    if not _logged:
        _logged = True
        log.exception("counting a run's event in the metrics failed; later failures not logged")


class RunCounter:
    """Count one run's events; a run that ends without `run_finished` (an exception, a
    cancelled client) counts as `cancelled` or `error`. A `fim.observe.Watch`."""

    trace_id: str | None = None  # metrics name no trace

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.blocked: set[str] = set()
        """The tool calls a hook blocked."""
        self.budget = False
        """A budget stopped the run (its `error` event's kind)."""
        self.finished = False
        self.started = 0.0

    def __enter__(self) -> RunCounter:
        METRICS.c_active(self.agent).inc()
        self.started = time.perf_counter()
        return self

    def on(self, event: Event) -> None:
        try:
            METRICS.on(self.agent, event, self.blocked, self)
        except Exception:  # counting never fails a run: this event goes uncounted
            _failed()
        if event.type == "run_finished":
            self.finished = True

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        m, agent = METRICS, self.agent
        try:
            m.c_active(agent).dec()
            if self.finished:
                return
            cancelled = isinstance(exc, GeneratorExit | asyncio.CancelledError)
            outcome = "cancelled" if cancelled else BUDGET_EXCEEDED if self.budget else "error"
            m.c_runs(agent, outcome).inc()
            m.c_run_seconds(agent).observe(time.perf_counter() - self.started)
        except Exception:  # as in `on`: the run's own outcome stands
            _failed()
