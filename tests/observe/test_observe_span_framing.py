"""A run's own span and its counts, written as bytes where the run ends
(`fim.observe.otlp_spans.framed_root`, `fim.observe.otlp_attributes.number`): the same
bytes the general encoder writes, and the span the SDK's encoder makes."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.exporter.otlp.proto.common.trace_encoder import (
    encode_spans as upstream_encode,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import TraceState

from fim.observe.otlp_attributes import _encoded, number
from fim.observe.otlp_fast import encode_request
from fim.observe.otlp_spans import framed_root, framed_span
from fim.observe.sdk import OpenSpan

STATE = TraceState([("vendor", "x1")])


def context(span_id: int, remote: bool = False, state: TraceState | None = None) -> SpanContext:
    return SpanContext(0xABCDEF0123, span_id, remote, TraceFlags(1), state)


@pytest.mark.parametrize(
    "parent",
    [None, context(0x11), context(0x11, remote=True), context(0x11, remote=True, state=STATE)],
    ids=["no parent", "local parent", "remote parent", "remote parent with trace state"],
)
@pytest.mark.parametrize("failed", [False, True])
def test_a_runs_own_span_framed_where_it_ends_is_the_sdk_span(parent, failed):
    """`framed_root` writes a run's span from its record (context, parent, kind, times,
    attributes, events, status): byte for byte what the general encoder writes, and the
    request decodes to the span the SDK's own encoder makes."""
    state = parent.trace_state if parent is not None else None
    attributes = {
        "gen_ai.operation.name": "invoke_agent", "fim.run_id": "r-1", "fim.depth": 0,
        "fim.iterations": 300, "fim.cost_usd": 0.25, "gen_ai.response.finish_reasons": ("stop",),
    }  # fmt: skip
    root = OpenSpan("invoke_agent a", context(0x22, state=state), parent, SpanKind.SERVER, 10, {})
    root.attributes.update(attributes)
    if failed:
        root.add_event("fim.error", {"fim.error.kind": "model", "message": "m"}, 15)
        root.error("model")
    framed = framed_root(root, 20)
    assert framed == framed_span(
        root.name, root.context, parent, root.kind, 10, 20, root.attributes,
        tuple(root.events), root.status,
    )  # fmt: skip
    fim, scope = Resource({"service.name": "fim"}), InstrumentationScope("fim")
    sdk = ReadableSpan(
        "invoke_agent a", root.context, parent, fim, attributes, kind=SpanKind.SERVER,
        events=[Event(n, a, t) for n, a, t in root.events], status=root.status,
        start_time=10, end_time=20, instrumentation_scope=scope,
    )  # fmt: skip
    ours = ExportTraceServiceRequest.FromString(encode_request([framed], (fim, scope)))
    assert ours == upstream_encode([sdk])
    assert (ours.resource_spans[0].scope_spans[0].spans[0].status.code == 2) is failed


@pytest.mark.parametrize("key", ["gen_ai.usage.input_tokens", "k", "", "x" * 40])
@pytest.mark.parametrize(
    "value", [0, 1, 127, 128, 300, 16_383, 16_384, 2**40, -1, -(2**63), True, False, 0.5]
)
def test_a_count_written_from_its_keys_head_is_the_general_encoding(key, value):
    """A chat span's token counts and iteration are written from their key's kept head
    (`number`): the same bytes as the general encoder's for every int, and what is not a
    small count (negative, large, a bool, a float) goes the general way."""
    assert number(key, value) == _encoded(key, value)
    assert number(key, value) == _encoded(key, value)  # the head now kept
