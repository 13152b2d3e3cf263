"""Events -> OpenTelemetry spans, following the GenAI semantic conventions.

One consumer for every engine: it reads the event stream a run yields (react, dag,
workflows) and opens and closes spans from it, using the events' own timestamps. It is
imported only when tracing is configured (see `fim.observe.tracing_enabled`).

Span tree: `invoke_agent {agent}` per run, `chat {model}` per model call, `execute_tool
{name}` per tool call (hook decisions as span events, blocked or failed calls with error
status), `workflow {name}` and `node {id}` for workflows, `step {id}` for dag steps. A
delegated run or a workflow's agent node is a child of the tool call or node that started
it: the parent's consumer is kept in a context variable the child's consumer reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from fim.errors import RunError
from fim.events import Event
from fim.observe.context import current_call, current_node

_lock = threading.Lock()
_provider: Any = None
_tracer: Any = None
"""The provider's tracer, made once: `get_tracer` builds a new Tracer and instrumentation
scope on every call, which was ~40% of what tracing added to a run."""
_scope: ContextVar[_Trace | _Dropped | None] = ContextVar("fim_trace_scope", default=None)
"""The innermost traced run or workflow of the running task: a run it starts is its child."""

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def provider() -> Any:
    """The process's tracer provider, exporting with OTLP as the standard environment
    variables say (`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the default, or `grpc`;
    endpoint, headers, timeouts and `OTEL_SERVICE_NAME` are read by the SDK itself)."""
    global _provider
    with _lock:
        if _provider is None:
            # deferred: loading opentelemetry costs tens of ms
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            tp = TracerProvider(resource=_resource())
            tp.add_span_processor(BatchSpanProcessor(_exporter()))
            _provider = tp
        return _provider


def _resource() -> Any:
    """The SDK's own `Resource.create` (service name, `OTEL_RESOURCE_ATTRIBUTES`, SDK
    attributes), with its hash computed once.

    The OTLP encoder groups every exported span by resource, and `Resource.__hash__`
    JSON-dumps the attributes on each call: ~5 us a span, a sixth of the encoder's work.
    A resource is immutable, so the hash never changes."""
    # deferred: loading opentelemetry costs tens of ms
    from opentelemetry.sdk.resources import Resource

    class _HashedOnce(Resource):
        def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
            super().__init__(attributes, schema_url)
            self._hash = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    made = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "fim")})
    return _HashedOnce(made.attributes, made.schema_url)


def _exporter() -> Any:
    env = os.environ
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        try:
            # deferred: optional dependency, absent in some installs
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RunError(  # not ConfigError: that has no `hint` (it raised TypeError)
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc",
                hint="pip install 'fim[otel]', or use http/protobuf",
            ) from exc
        return OTLPSpanExporter()
    try:
        # deferred: loading opentelemetry costs tens of ms
        from fim.observe.otlp_fast import FastOTLPSpanExporter
    except ImportError:  # an SDK older than the exporter internals the subclass reuses
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    return FastOTLPSpanExporter.create()


def flush(timeout_ms: int = 10_000) -> bool:
    """Export every finished span now (tests, short-lived CLI runs)."""
    return _provider.force_flush(timeout_ms) if _provider is not None else True


def shutdown() -> None:
    global _provider, _tracer
    with _lock:
        _tracer = None
        if _provider is not None:
            _provider.shutdown()
            _provider = None


def tracer() -> trace.Tracer:
    global _tracer
    found = _tracer
    if found is None:
        found = _tracer = provider().get_tracer("fim")
    return found


_captures: dict[str, bool] = {}


def _capture() -> bool:
    """Whether contents are recorded; read once per value of the variable (a run checked
    the environment and normalized it each time)."""
    raw = os.environ.get(CAPTURE_ENV, "")
    found = _captures.get(raw)
    if found is None:
        found = _captures[raw] = raw.strip().lower() in ("1", "true", "yes")
    return found


def _provider_of(model: str) -> str | None:
    """`anthropic/claude-x` -> `anthropic`: litellm's provider prefix."""
    return model.split("/", 1)[0] if "/" in model else None


def _ns(ts: float) -> int:
    return int(ts * 1e9)


_git_heads: dict[Path, str] = {}


def git_commit(root: Path | None) -> str:
    """The commit the project's checkout is at, read from .git without running git
    (empty when the project is not a git checkout)."""
    if root is None:
        return ""
    known = _git_heads.get(root)  # the snapshot's own Path: no new Path, no rehash
    if known is not None:
        return known
    root = Path(root)
    if root in _git_heads:
        return _git_heads[root]
    commit = ""
    for folder in (root, *root.parents):
        git = folder / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>"
            text = git.read_text(errors="replace").strip()
            if text.startswith("gitdir:"):
                git = (folder / text.split(":", 1)[1].strip()).resolve()
        if git.is_dir():
            commit = _read_head(git)
            break
    _git_heads[root] = commit
    return commit


def _read_head(git: Path) -> str:
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        return ""
    return ""


class _Dropped:
    """A run or workflow the sampler dropped, and every run it starts: no span is built
    for any of them, but each still has the root's (non-recording) span, so its trace
    context -- trace id, the sampled flag off -- reaches delegated runs and outgoing HTTP
    calls, and a delegated run joins the same unsampled trace without sampling again."""

    __slots__ = ("root",)

    def __init__(self, root: Span) -> None:
        self.root = root

    def parent_for(self, agent: str) -> Span:
        return self.root


class _Trace:
    """The spans of one run or workflow, opened and closed from its events."""

    def __init__(self, root: Span, mask: Callable[[str], str] | None) -> None:
        self.root = root
        self.root_context = trace.set_span_in_context(root)
        """The context of `root`, made once: most spans are its children."""
        self.start_span = tracer().start_span
        """Bound once: a method lookup per span is measurable at a few spans a run."""
        self.mask = mask or (lambda text: text)
        self.capture = _capture()
        self.tools: dict[str, tuple[Span, str, dict[str, Any]]] = {}
        self.nodes: dict[str, tuple[Span, str]] = {}
        self.steps: dict[str, Span] = {}
        self.failed = False
        self.pending: dict[str, Any] = {}
        """Root attributes known before the end, set with the last ones in one call (the
        SDK takes the span's lock and cleans the values per call)."""

    # -- children of this trace (delegations, agent nodes) -------------------------

    def parent_for(self, agent: str) -> Span:
        """The span a child run started now belongs under: the open `call_agent` call
        naming this agent, else the only open tool call, else the newest open agent node,
        else this trace's root."""

        call = current_call.get()
        if call is not None and call in self.tools:
            return self.tools[call][0]
        node = current_node.get()
        if node is not None:
            if node not in self.nodes:  # the node's task ran before its event was read
                self.nodes[node] = (self._start(f"node {node}", time.time(), self.root), "")
            return self.nodes[node][0]
        calls = [span for span, name, args in self.tools.values() if name == "call_agent"]
        named = [
            span
            for span, name, args in self.tools.values()
            if name == "call_agent" and args.get("agent") == agent
        ]
        if named:
            return named[0]
        if len(calls) == 1 or len(self.tools) == 1:
            return (calls or [s for s, _, _ in self.tools.values()])[0]
        agents = [span for span, kind in self.nodes.values() if kind == "agent"]
        if agents:
            return agents[-1]
        if len(self.nodes) == 1:
            return next(iter(self.nodes.values()))[0]
        return self.root

    def _start(
        self,
        name: str,
        ts: float,
        parent: Span,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
    ) -> Span:
        """A span started at `ts` with `attributes` (no None values: callers leave them out)."""
        return self.start_span(
            name,
            context=self.root_context if parent is self.root else trace.set_span_in_context(parent),
            kind=kind,
            start_time=int(ts * 1e9),
            attributes=attributes,
        )

    # -- events --------------------------------------------------------------------

    def on(self, event: Event) -> None:
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)

    def _on_run_started(self, e: Any) -> None:
        pending = self.pending
        pending["fim.engine"] = e.engine
        if e.snapshot_version:
            pending["fim.snapshot.version"] = e.snapshot_version
        if self.capture:
            pending["gen_ai.input.messages"] = self.mask(e.input)

    def _on_llm_call(self, e: Any) -> None:
        request_model = getattr(e, "request_model", "") or e.model
        usage = e.usage
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": request_model,
            "gen_ai.response.model": e.model,
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "fim.iteration": e.iteration,
        }
        system = getattr(e, "provider", "") or _provider_of(request_model)
        if system is not None:
            attributes["gen_ai.system"] = system
        finish = getattr(e, "finish_reason", None)
        if finish:
            attributes["gen_ai.response.finish_reasons"] = [finish]
        if usage.cost is not None:
            attributes["fim.cost_usd"] = usage.cost
        ts = e.ts
        self.start_span(
            f"chat {request_model}",
            context=self.root_context,
            kind=SpanKind.CLIENT,
            start_time=int((ts - e.duration_ms / 1000) * 1e9),
            attributes=attributes,
        ).end(end_time=int(ts * 1e9))

    def _on_tool_call(self, e: Any) -> None:
        # The name and the id are written by the model too (an unknown tool's name is
        # whatever it sent): masked like the arguments.
        name = self.mask(e.name)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": self.mask(e.call_id),
        }
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = self.mask(
                json.dumps(e.arguments, default=str)
            )
        span = self._start(f"execute_tool {name}", e.ts, self.root, attributes=attributes)
        self.tools[e.call_id] = (span, e.name, dict(e.arguments))

    def _on_hook(self, e: Any) -> None:
        target = self.root
        if getattr(e, "call_id", None) in self.tools:
            target = self.tools[e.call_id][0]
        elif e.tool_name is not None:
            open_ = [(s, n) for s, n, _ in self.tools.values()]
            same = [s for s, n in open_ if n == e.tool_name]
            if same:
                target = same[0]
            elif len(open_) == 1:
                target = open_[0][0]
        attributes = {
            "fim.hook": e.hook,
            "fim.hook.point": e.point,
            "fim.hook.decision": e.decision,
        }
        if e.reason:
            attributes["fim.hook.reason"] = self.mask(e.reason)
        target.add_event("fim.hook", attributes, timestamp=_ns(e.ts))
        if e.decision == "block":
            target.set_attribute("fim.tool.blocked", True)
            target.set_status(Status(StatusCode.ERROR, f"blocked by hook {e.hook}"))

    def _on_tool_result(self, e: Any) -> None:
        opened = self.tools.pop(e.call_id, None)
        if opened is None:
            return
        span = opened[0]
        if self.capture:
            span.set_attribute("gen_ai.tool.call.result", self.mask(e.content))
        if e.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, self.mask(e.content)[:200]))
        span.end(end_time=_ns(e.ts))

    def _on_error(self, e: Any) -> None:
        self.failed = True
        self.root.add_event(
            "fim.error", {"fim.error.kind": e.kind, "message": self.mask(e.message)[:1000]}
        )
        self.root.set_attribute("error.type", e.kind)
        self.root.set_status(Status(StatusCode.ERROR, self.mask(e.message)[:200]))

    def _on_run_finished(self, e: Any) -> None:
        attributes, self.pending = self.pending, {}
        attributes["fim.status"] = e.status
        attributes["fim.iterations"] = e.iterations
        attributes["gen_ai.usage.input_tokens"] = e.usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = e.usage.completion_tokens
        if e.usage.cost is not None:
            attributes["fim.cost_usd"] = e.usage.cost
        if self.capture:
            attributes["gen_ai.output.messages"] = self.mask(e.output)
        self.root.set_attributes(attributes)  # one call: each takes the span's lock
        if e.status != "ok" and not self.failed:
            self.root.set_status(Status(StatusCode.ERROR, e.status))

    def _on_step_started(self, e: Any) -> None:
        step: Any = self.mask(e.step)  # the planner (a model) names the steps
        self.steps[e.step] = self._start(
            f"step {step}", e.ts, self.root, attributes={"fim.step": step}
        )

    def _on_step_finished(self, e: Any) -> None:
        span = self.steps.pop(e.step, None)
        if span is not None:
            if e.status != "ok":
                span.set_status(Status(StatusCode.ERROR, e.status))
            span.end(end_time=_ns(e.ts))

    def _on_node_started(self, e: Any) -> None:
        if e.node in self.nodes:  # opened early by a run the node started
            span = self.nodes[e.node][0]
            span.set_attribute("fim.node", e.node)
            span.set_attribute("fim.node.type", e.node_type)
            self.nodes[e.node] = (span, e.node_type)
            return
        span = self._start(
            f"node {e.node}",
            e.ts,
            self.root,
            attributes={"fim.node": e.node, "fim.node.type": e.node_type},
        )
        self.nodes[e.node] = (span, e.node_type)

    def _on_node_finished(self, e: Any) -> None:
        opened = self.nodes.pop(e.node, None)
        if opened is not None:
            opened[0].end(end_time=_ns(e.ts))

    def _on_node_failed(self, e: Any) -> None:
        opened = self.nodes.pop(e.node, None)
        if opened is not None:
            opened[0].set_attribute("fim.node.attempt", e.attempt)
            opened[0].set_status(Status(StatusCode.ERROR, self.mask(e.error)[:200]))
            opened[0].end(end_time=_ns(e.ts))

    def _on_node_skipped(self, e: Any) -> None:
        self.root.add_event(
            "fim.node_skipped",
            {"fim.node": e.node, "reason": self.mask(e.reason)},
            timestamp=_ns(e.ts),
        )

    def _on_workflow_finished(self, e: Any) -> None:
        self.root.set_attribute("fim.status", e.status)
        if e.status in ("failed", "cancelled"):
            self.root.set_status(Status(StatusCode.ERROR, e.status))

    def close(self) -> None:
        """End whatever the stream left open (a cancelled run): nothing leaks."""
        for span, _, _ in self.tools.values():
            span.set_status(Status(StatusCode.ERROR, "not finished"))
            span.end()
        for span, _ in self.nodes.values():
            span.end()
        for span in self.steps.values():
            span.end()
        if self.pending:
            self.root.set_attributes(self.pending)
        self.root.end()


_HANDLERS: dict[str, Callable[[_Trace, Any], None]] = {
    name[len("_on_") :]: fn for name, fn in vars(_Trace).items() if name.startswith("_on_")
}
"""Event type -> handler, built once (tokens and other unhandled events cost one lookup)."""


def _parent_context(parent: _Trace | _Dropped | None, agent: str) -> Any:
    if parent is not None:
        return trace.set_span_in_context(parent.parent_for(agent))
    return otel_context.get_current()  # e.g. the W3C context of the incoming HTTP request


async def _consume(events: AsyncIterator[Event], trace_: _Trace) -> AsyncGenerator[Event, None]:
    token = _scope.set(trace_)
    try:
        async with aclosing(events) as stream:  # type: ignore[type-var]
            async for event in stream:
                handler = _HANDLERS.get(event.type)  # `trace_.on`, without a call per event
                if handler is not None:
                    handler(trace_, event)
                yield event
    except BaseException as exc:
        trace_.root.record_exception(exc)
        trace_.root.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        trace_.close()
        with contextlib.suppress(ValueError):  # closed from another context
            _scope.reset(token)


async def _pass(events: AsyncIterator[Event], dropped: _Dropped) -> AsyncGenerator[Event, None]:
    """The events of a dropped run, untouched: only its trace context is in scope."""
    token = _scope.set(dropped)
    try:
        async with aclosing(events) as stream:  # type: ignore[type-var]
            async for event in stream:
                yield event
    finally:
        with contextlib.suppress(ValueError):  # closed from another context
            _scope.reset(token)


def _root(
    name: str, agent: str, parent: _Trace | _Dropped | None, attributes: dict[str, Any]
) -> Span:
    """The root span of a run or workflow: the one place the sampler is asked."""
    return tracer().start_span(
        name,
        context=_parent_context(parent, agent),
        kind=SpanKind.INTERNAL,
        attributes={k: v for k, v in attributes.items() if v is not None},
    )


def current_span() -> Span:
    """The span work running now belongs to: the tool call or node of the innermost traced
    run, else OpenTelemetry's current span (an incoming request's)."""
    scope = _scope.get()
    if scope is not None:
        return scope.parent_for("")
    return trace.get_current_span()


def inject(headers: Any) -> None:
    """Write the W3C `traceparent` (and baggage) of `current_span()` into `headers`."""

    propagate.inject(headers, context=trace.set_span_in_context(current_span()))


def trace_run(
    events: AsyncIterator[Event],
    *,
    agent: str,
    run_id: str,
    snapshot: Any,
    depth: int = 0,
    mask: Callable[[str], str] | None = None,
) -> AsyncIterator[Event]:
    parent = _scope.get()
    if isinstance(parent, _Dropped):
        # the sampling decision was made once, at the root: a run started by a dropped one
        # is dropped too (as the SDK's parent-based samplers would decide) at no cost
        return _pass(events, parent)
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "fim.run_id": run_id,
        "fim.depth": depth,
        "fim.project": getattr(getattr(snapshot, "project", None), "name", None),
        "fim.snapshot.version": getattr(snapshot, "version", None) or None,
        "vcs.ref.head.revision": git_commit(getattr(snapshot, "root", None)) or None,
    }
    span = _root(f"invoke_agent {agent}", agent, parent, attributes)
    if not span.is_recording():
        return _pass(events, _Dropped(span))
    return _consume(events, _Trace(span, mask or getattr(snapshot, "mask", None)))


def trace_workflow(
    events: AsyncIterator[Event], *, workflow: str, run_id: str, snapshot: Any
) -> AsyncGenerator[Event, None]:
    parent = _scope.get()
    if isinstance(parent, _Dropped):
        return _pass(events, parent)
    attributes = {
        "fim.workflow": workflow,
        "fim.run_id": run_id,
        "fim.project": getattr(getattr(snapshot, "project", None), "name", None),
        "fim.snapshot.version": getattr(snapshot, "version", None) or None,
        "vcs.ref.head.revision": git_commit(getattr(snapshot, "root", None)) or None,
    }
    span = _root(f"workflow {workflow}", workflow, parent, attributes)
    if not span.is_recording():
        return _pass(events, _Dropped(span))
    return _consume(events, _Trace(span, getattr(snapshot, "mask", None)))
