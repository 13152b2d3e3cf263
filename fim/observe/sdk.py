"""The OpenTelemetry SDK as fim uses it: the process's tracer provider and exporter (the
standard `OTEL_*` variables, no code), and the span record fim's spans are built in.

fim writes its spans from a run's finished events, one consumer per run, so it skips the
SDK's `Span` (a lock, per-value attribute cleaning, self-metrics and a copy at the end:
~13 us a span). A span ended goes to the SDK's batch processor serialized, when that is
the provider's one processor and exports over OTLP/HTTP (`_serialized_queue`), else as the
SDK's own `ReadableSpan`, made from an `OpenSpan` (~3 us), to whatever processors the
provider has. Imported only when tracing is on.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from fim.observe.exporters import exit_timeout, exporters, resource

_lock = threading.Lock()
_provider: Any = None
_tracer: Any = None
"""The provider's tracer, made once: `get_tracer` builds a new Tracer and instrumentation
scope on every call, which was ~40% of what tracing added to a run."""

_UNSET = Status(StatusCode.UNSET)
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SCOPE: Any = None
"""fim's instrumentation scope (made with the provider: the SDK class loads with it)."""


def provider() -> Any:
    """The process's tracer provider, exporting as the standard environment variables
    say: `OTEL_TRACES_EXPORTER` (`otlp`, the default, `console`, or both, comma-separated)
    and, for OTLP, `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `grpc`;
    endpoint, headers and timeouts are read by the SDK itself). Its spans are flushed when
    the process exits, within a bound (`_at_exit`)."""
    global _provider, SCOPE
    with _lock:
        if _provider is None:
            # deferred: loading opentelemetry costs tens of ms
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope

            SCOPE = SCOPE or InstrumentationScope("fim")

            # not the SDK's own exit hook: it waited out every retry of an unreachable
            # collector (7 s after a one-shot `fim run`), `_at_exit` is bounded
            tp = TracerProvider(resource=resource(), shutdown_on_exit=False)
            for exporter in exporters():
                if hasattr(exporter, "home"):  # fim's spans are queued serialized (`Sink`)
                    exporter.home = (tp.resource, SCOPE)
                _made.append(exporter)
                tp.add_span_processor(BatchSpanProcessor(exporter))
            _provider = tp
            if not _exit_hooked:
                _hook_exit()
        return _provider


_made: list[Any] = []
"""The exporters of the current provider (`_at_exit` tells them the process is ending)."""
_exit_hooked = False


def _hook_exit() -> None:
    global _exit_hooked
    # deferred: only a process that traces registers the hook
    import atexit

    atexit.register(_at_exit)
    _exit_hooked = True


def _at_exit() -> None:
    """Export what is left, bounded: each exporter is told the process is ending (fim's
    OTLP/HTTP one then tries once, no retries, within `EXIT_TIMEOUT_S`, and gives up on
    later batches after a failure), then the provider shuts down."""
    for exporter in _made:
        finishing = getattr(exporter, "finishing", None)
        if finishing is not None:
            finishing(exit_timeout())
    shutdown()


def flush(timeout_ms: int = 10_000) -> bool:
    """Export every finished span now (tests, short-lived CLI runs)."""
    return _provider.force_flush(timeout_ms) if _provider is not None else True


def shutdown() -> None:
    global _provider, _tracer
    with _lock:
        _tracer = None
        _made.clear()
        if _provider is not None:
            _provider.shutdown()
            _provider = None


def tracer() -> trace.Tracer:
    global _tracer
    found = _tracer
    if found is None:
        found = _tracer = provider().get_tracer("fim")
    return found


class ChildSpan:
    """A span of a run below its root, being built: what ending it needs
    (`Sink.children_of`). Its context is made only when work starts under it
    (`RunSpans.context_for`): most tool calls start none."""

    __slots__ = ("attributes", "events", "kind", "name", "span_id", "start", "status")

    def __init__(
        self, name: str, span_id: int, kind: SpanKind, start: int, attributes: dict[str, Any]
    ) -> None:
        self.name = name
        self.span_id = span_id
        self.kind = kind
        self.start = start
        self.attributes = attributes
        self.events: list[tuple[str, dict[str, Any], int]] = []
        self.status = _UNSET

    def add_event(self, name: str, attributes: dict[str, Any], ts: int) -> None:
        self.events.append((name, attributes, ts))

    def error(self, description: str) -> None:
        self.status = Status(StatusCode.ERROR, description)


class OpenSpan(ChildSpan):
    """A root span being built (a run's, a workflow's, a request's): a `ChildSpan` with its
    context and its parent's (`Sink.emit` ends it)."""

    __slots__ = ("context", "parent")

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        start: int,
        attributes: dict[str, Any],
    ) -> None:
        self.name = name  # not `super().__init__`: one frame less on every run
        self.span_id = context[1]  # `SpanContext` is a tuple: its properties are calls
        self.kind = kind
        self.start = start
        self.attributes = attributes
        self.events = []
        self.status = _UNSET
        self.context = context
        self.parent = parent


class Sink:
    """What ending an `OpenSpan` needs from the provider, looked up once per provider: its
    resource, sampler, id generator and span processors (all public attributes of the
    SDK's `Tracer`), and the span limits the standard variables set."""

    def __init__(self, tracer_: Any) -> None:
        # deferred: loading opentelemetry's SDK costs tens of ms
        from opentelemetry.sdk.trace import Event as SdkEvent
        from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.readable = ReadableSpan
        self.event = SdkEvent
        self.resource = tracer_.resource
        self.sampler = tracer_.sampler
        self.ids = tracer_.id_generator
        self.on_end = tracer_.span_processor.on_end
        self.scope = SCOPE or InstrumentationScope("fim")
        self.processors = getattr(tracer_.span_processor, "_span_processors", None)
        """The provider's processors when this was made (a processor added since makes a
        new tuple, and `sink()` a new `Sink`)."""
        self.queue = _serialized_queue(tracer_)
        limits = SpanLimits()
        self.max_length: int | None = limits.max_span_attribute_length
        self.max_attributes: int | None = limits.max_span_attributes
        self.direct = False
        """Whether a child's attributes may be handed to `children_of`'s callable as
        serialized bytes: its spans are queued serialized, with no length limit and room
        for the attributes fim's spans carry (`DIRECT_ATTRIBUTES`)."""
        if self.queue is not None:
            # deferred: loaded with the exporter, only when tracing is on
            from fim.observe.otlp_attributes import joined, kept_block
            from fim.observe.otlp_spans import child_queue, framed_span

            self.framed = framed_span
            self.child_queue = child_queue
            self.joined = joined
            self.kept_block = kept_block
            most = self.max_attributes
            self.direct = self.max_length is None and (most is None or most >= DIRECT_ATTRIBUTES)
        self.capture = os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")
        """Whether prompts and completions are recorded (read with the provider, as the
        SDK reads the `OTEL_*` variables)."""
        # deferred: loading opentelemetry's SDK costs tens of ms
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        from opentelemetry.sdk.trace.sampling import DEFAULT_ON

        self.default_sampler = self.sampler is DEFAULT_ON
        self.bits: Callable[[int], int] = (
            random.getrandbits if type(self.ids) is RandomIdGenerator else _no_bits
        )
        """The SDK's default id generator's source, called inline for a span id (`0`, never
        a valid id, asks `ids.generate_span_id`: always, for any other generator)."""
        self.random_flag = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))
        random_ids = getattr(self.ids, "is_trace_id_random", None)  # newer SDKs only
        self.random_root = self.random_flag if random_ids is not None and random_ids() else 0
        """The W3C level-2 `random` flag of a new trace, as the SDK would set it."""

    def finished(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        start: int,
        end: int,
        attributes: dict[str, Any],
        events: tuple[Any, ...] = (),
        status: Status = _UNSET,
    ) -> None:
        """A span ended: serialized into the batch queue, or made as the SDK's
        `ReadableSpan` (`events` as `(name, attributes, time)` become the SDK's `Event`s)
        and handed to the processors."""
        if self.max_length is not None or (
            self.max_attributes is not None and len(attributes) > self.max_attributes
        ):
            attributes = self._limited(attributes)
        if self.queue is not None:
            self.queue(
                self.framed(name, context, parent, kind, start, end, attributes, events, status)
            )
            return
        self.on_end(
            self.readable(
                name=name,
                context=context,
                parent=parent,
                resource=self.resource,
                attributes=attributes,
                events=tuple(e if type(e) is not tuple else self.event(*e) for e in events),
                kind=kind,
                status=status,
                start_time=start,
                end_time=end,
                instrumentation_scope=self.scope,
            )
        )

    def children_of(self, root: SpanContext) -> Child:
        """How a child span of `root` (a run's or workflow's span) ends: serialized with
        what it shares with `root` written once, or made a `ReadableSpan` (`finished`)."""
        queue, most = self.queue, self.max_attributes
        if queue is None or self.max_length is not None:
            trace_id, flags, state = root.trace_id, root.trace_flags, root.trace_state

            def made(
                name: str, span_id: int, kind: SpanKind, start: int, end: int,
                attributes: dict[str, Any], events: Sequence[Any] = (), status: Status = _UNSET,
            ) -> None:  # fmt: skip
                context = SpanContext(trace_id, span_id, False, flags, state)
                self.finished(
                    name, context, root, kind, start, end, attributes, tuple(events), status
                )

            return made
        return self.child_queue(root, queue, _UNSET, most, self._limited)

    def emit(self, span: OpenSpan, end: int) -> None:
        self.finished(
            span.name, span.context, span.parent, span.kind, span.start, end, span.attributes,
            tuple(span.events), span.status,
        )  # fmt: skip

    def _limited(self, attributes: dict[str, Any]) -> dict[str, Any]:
        """OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT and OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, as
        the SDK applies them: the first attributes kept, strings cut to the length."""
        kept = list(attributes.items())[: self.max_attributes]
        size = self.max_length
        if size is None:
            return dict(kept)
        return {
            key: value[:size]
            if isinstance(value, str)
            else [v[:size] if isinstance(v, str) else v for v in value]
            if isinstance(value, list)
            else value
            for key, value in kept
        }

    def root(
        self, name: str, parent: SpanContext | None, attributes: dict[str, Any]
    ) -> tuple[SpanContext, bool]:
        """The context of a run's or workflow's span and whether it is recorded: the
        sampler asked once, as the SDK's `Tracer.start_span` asks it."""
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            random_id = parent.trace_flags & self.random_flag
        else:
            parent = None
            trace_id = self.bits(128) or self.ids.generate_trace_id()
            random_id = self.random_root
        if self.default_sampler:
            # the SDK's default, `parentbased_always_on`, decided as it decides: the
            # parent's sampled flag, else sampled; the parent's trace state kept (a test
            # holds this to the SDK's own decision)
            sampled = parent is None or parent.trace_flags.sampled
            state = parent.trace_state if parent is not None else None
        else:
            context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent else None
            result = self.sampler.should_sample(
                context, trace_id, name, SpanKind.INTERNAL, attributes
            )
            sampled, state = result.decision.is_sampled(), result.trace_state
            if result.attributes:
                attributes.update(result.attributes)
        flags = TraceFlags((TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT) | random_id)
        span_id = self.bits(64) or self.ids.generate_span_id()
        made = SpanContext(trace_id, span_id, False, flags, state)
        # RECORD_ONLY is recorded but never exported (span processors drop unsampled
        # spans): built for nobody, so treated as dropped.
        return made, sampled


def _serialized_queue(tracer_: Any) -> Any:
    """The queue of the SDK's batch processor, when the provider's one processor is the
    batch processor `provider()` made for `FastOTLPSpanExporter`; else None (another SDK
    version, gRPC). fim's spans then go in serialized, framed in the run's thread: no
    `ReadableSpan` is built, the exporter's thread only joins bytes, and the spans waiting
    for export are `bytes`, which the cyclic garbage collector never walks (512
    `ReadableSpan`s in the queue, each a few containers, made young collections of the
    runs' own objects ~5% of a run dearer). The SDK's batching stays: its batch size,
    delay, queue limit (`OTEL_BSP_*`), worker thread, flush, shutdown and fork handling."""
    processors = getattr(tracer_.span_processor, "_span_processors", None)
    if not processors or len(processors) != 1:
        return None
    batch = getattr(processors[0], "_batch_processor", None)
    if getattr(getattr(batch, "_exporter", None), "home", None) is None:
        return None
    return getattr(batch, "emit", None)


DIRECT_ATTRIBUTES = 32
"""More than the attributes any span of fim's carries (a chat span 9, a run's at most 20)."""


def _no_bits(size: int) -> int:
    return 0


Child = Callable[..., None]
"""`Sink.children_of`: (name, span id, kind, start, end, attributes[, events, status])."""

_current: tuple[Any, Sink] | None = None


def sink() -> Sink:
    """The `Sink` of the current tracer (made again when the provider is, or when a span
    processor was added to it: that one gets `ReadableSpan`s)."""
    global _current
    made = tracer()
    if (
        _current is None
        or _current[0] is not made
        or _current[1].processors is not getattr(made.span_processor, "_span_processors", None)
    ):
        _current = (made, Sink(made))
    return _current[1]
