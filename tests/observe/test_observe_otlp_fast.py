"""fim's in-place OTLP span encoder makes the very request the upstream encoder makes."""

from __future__ import annotations

import enum
from typing import Any

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
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import TraceState
from opentelemetry.trace.status import Status, StatusCode

from fim.observe.otlp_fast import encode_request


def encode_spans(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    """fim's request, as the receiver decodes it."""
    return ExportTraceServiceRequest.FromString(encode_request(spans))


class Color(enum.IntEnum):
    RED = 1


def ctx(trace_id: int, span_id: int, remote: bool = False, state: TraceState | None = None):
    return SpanContext(
        trace_id, span_id, is_remote=remote, trace_flags=TraceFlags(1), trace_state=state
    )


VALUES = {
    "s": "text",
    "empty": "",
    "b": True,
    "f": False,
    "i": -42,
    "zero": 0,
    "big": 2**63 - 1,
    "too_big": 2**70,  # upstream logs and skips it
    "d": 3.5,
    "nan_free": -0.0,
    "ss": ["a", "b"],
    "bs": (True, False),
    "is": [1, 2, 3],
    "ds": (1.5, 2.5),
    "empty_seq": [],
    "mixed": ["a", 1],
    "bytes": b"\x00\x01",
    "enum": Color.RED,
    "none_in": [None, "x"],
    "map": {"k": "v", "n": 1},
}


def spans() -> list[ReadableSpan]:
    fim = Resource({"service.name": "fim", "n": 1}, "https://schema/1")
    other = Resource({"service.name": "other", "tags": ["a", "b"]})
    scope = InstrumentationScope("fim", "1.0", "https://scope", {"scope.attr": 7})
    bare = InstrumentationScope("bare")
    state = TraceState([("vendor", "x1"), ("other", "y")])
    return [
        ReadableSpan(
            "root",
            ctx(1, 2, state=state),
            None,
            fim,
            dict(VALUES),
            events=[
                Event("hook", {"fim.hook": "block", "n": 1}, 123),
                Event("bare", None, 456),
            ],
            links=[
                Link(ctx(9, 8, remote=True, state=state), {"l": 1.0}),
                Link(ctx(7, 6)),
            ],
            kind=SpanKind.SERVER,
            status=Status(StatusCode.ERROR, "blocked"),
            start_time=10,
            end_time=20,
            instrumentation_scope=scope,
        ),
        ReadableSpan(
            "chat",
            ctx(1, 3),
            ctx(1, 2, remote=True),
            fim,
            {"gen_ai.usage.input_tokens": 5, "gen_ai.response.finish_reasons": ["stop"]},
            kind=SpanKind.CLIENT,
            status=Status(StatusCode.OK),
            start_time=11,
            end_time=12,
            instrumentation_scope=scope,
        ),
        ReadableSpan("no scope", ctx(1, 4), ctx(1, 2), fim, None, start_time=1, end_time=2),
        ReadableSpan(
            "other resource",
            ctx(5, 6),
            ctx(5, 1),
            other,
            {"x": "y"},
            kind=SpanKind.PRODUCER,
            instrumentation_scope=bare,
            start_time=3,
            end_time=4,
        ),
        ReadableSpan(
            "consumer", ctx(1, 5), None, fim, {}, kind=SpanKind.CONSUMER, instrumentation_scope=bare
        ),
        ReadableSpan(
            "internal", ctx(1, 6), ctx(1, 3), fim, {"k": "v"}, instrumentation_scope=scope
        ),
    ]


def test_the_fast_encoder_makes_the_upstream_request_field_for_field():
    batch = spans()
    ours, theirs = encode_spans(batch), upstream_encode(batch)
    assert ours == theirs
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )
    decoded = ExportTraceServiceRequest.FromString(ours.SerializeToString())
    assert decoded == theirs
    # the request is not trivially equal: every group, span, event, link and value is there
    assert [len(rs.scope_spans) for rs in decoded.resource_spans] == [3, 1]
    root = decoded.resource_spans[0].scope_spans[0].spans[0]
    keys = [kv.key for kv in root.attributes]
    assert "too_big" not in keys and {"bytes", "enum", "map", "mixed", "ss"} <= set(keys)
    assert root.trace_state == "vendor=x1,other=y" and len(root.events) == 2
    assert root.links[0].flags == 0x300 and root.status.message == "blocked"
    assert decoded.resource_spans[0].scope_spans[0].spans[1].flags == 0x300


def test_attributes_encoded_from_the_cache_are_the_same_bytes():
    """A batch encoded again (every scalar attribute now from the cache) is the same
    request; `True` and `1`, equal as keys of a dict, stay a bool and an int."""
    batch = spans()
    first = encode_spans(batch).SerializeToString(deterministic=True)
    assert encode_spans(batch).SerializeToString(deterministic=True) == first
    flags = [
        ReadableSpan("a", ctx(1, 7), None, None, {"x": True, "y": 1.0}),
        ReadableSpan("b", ctx(1, 8), None, None, {"x": 1, "y": 1}),
    ]
    assert encode_spans(flags) == upstream_encode(flags)
    values = [
        s.attributes[0].value for s in encode_spans(flags).resource_spans[0].scope_spans[0].spans
    ]
    assert [v.WhichOneof("value") for v in values] == ["bool_value", "int_value"]


def test_an_empty_batch_and_a_batch_of_one_match_too():
    assert encode_spans([]) == upstream_encode([])
    (one,) = spans()[2:3]
    assert encode_spans([one]) == upstream_encode([one])


def test_http_protobuf_exports_with_the_fast_encoder_and_grpc_keeps_upstream(monkeypatch):
    from fim.observe import exporters
    from fim.observe.otlp_fast import FastOTLPSpanExporter

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    http = exporters.otlp_exporter()
    assert type(http) is FastOTLPSpanExporter
    http.shutdown()
    grpc = pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    made = exporters.otlp_exporter()
    assert type(made) is grpc.OTLPSpanExporter
    made.shutdown()


def test_a_span_queued_serialized_is_the_span_the_sdk_path_sends():
    """fim's own spans are queued as `framed_span` bytes (`fim.observe.sdk`): in the request
    they are exactly the `ReadableSpan`s of the same fields, `(name, attributes, time)`
    events included, grouped under the exporter's home resource and scope."""
    from fim.observe.otlp_spans import framed_span

    batch = [s for s in spans()[:2]]
    home = (batch[0].resource, batch[0].instrumentation_scope)
    tuples = [(e.name, e.attributes, e.timestamp) for e in batch[0].events]
    serialized = [
        framed_span(
            s.name, s.context, s.parent, s.kind, s.start_time, s.end_time, s.attributes,
            tuples if s is batch[0] else (), s.status, s.links,
        )
        for s in batch
    ]  # fmt: skip
    assert encode_spans(batch) == ExportTraceServiceRequest.FromString(
        encode_request(serialized, home)
    )
    mixed = ExportTraceServiceRequest.FromString(encode_request([serialized[0], batch[1]], home))
    assert mixed == upstream_encode(batch)  # one group: the home resource and scope


def test_a_models_long_text_is_encoded_but_never_kept():
    """A hostile model's tool names and captured texts are unique and may be long: kept,
    8,192 of them could hold gigabytes. Long strings are encoded each time (the same
    bytes), short recurring values are kept."""
    from fim.observe import otlp_attributes

    long = "x" * (otlp_attributes.KEEP_CHARS + 1)
    batch = [
        ReadableSpan(
            "execute_tool " + long,
            ctx(1, 9),
            None,
            None,
            {"gen_ai.tool.name": long, "reasons": [long], "short": "kept"},
        )
    ]
    assert encode_spans(batch) == upstream_encode(batch)
    kept = otlp_attributes._KEPT
    assert ("short", "kept") in kept
    assert not any(long in (key[1] if type(key[1]) is tuple else (key[1],)) for key in kept)
    from opentelemetry.trace import SpanKind

    from fim.observe import otlp_spans

    queued: list[bytes] = []
    end = otlp_spans.child_queue(ctx(1, 2), queued.append, Status(StatusCode.UNSET), None, dict)
    end("execute_tool " + long, 3, SpanKind.INTERNAL, 1, 2, {})
    assert len(queued) == 1 and "execute_tool " + long not in otlp_spans._NAMES


def test_a_child_framed_with_its_parents_shared_fields_is_the_sdk_span():
    """`child_queue` writes what a run's children share with it (trace id, parent id,
    trace state, flags) once: each child is still exactly the SDK span of its fields."""
    from opentelemetry.trace import SpanKind

    from fim.observe.otlp_spans import child_queue

    state = TraceState([("vendor", "x1")])
    parent = ctx(0xABCDEF, 0x1234, state=state)
    fim = Resource({"service.name": "fim"})
    scope = InstrumentationScope("fim")
    queued: list[bytes] = []
    unset = Status(StatusCode.UNSET)
    end = child_queue(parent, queued.append, unset, None, dict)
    end("chat m", 0x77, SpanKind.CLIENT, 10, 20, {"gen_ai.system": "openai"})
    end("execute_tool t", 0x78, SpanKind.INTERNAL, 11, 19, {}, [("fim.hook", {"d": "allow"}, 12)],
        Status(StatusCode.ERROR, "blocked"))  # fmt: skip
    sdk = [
        ReadableSpan("chat m", ctx(0xABCDEF, 0x77, state=state), parent, fim,
                     {"gen_ai.system": "openai"}, kind=SpanKind.CLIENT, start_time=10,
                     end_time=20, instrumentation_scope=scope),
        ReadableSpan("execute_tool t", ctx(0xABCDEF, 0x78, state=state), parent, fim, {},
                     events=[Event("fim.hook", {"d": "allow"}, 12)],
                     status=Status(StatusCode.ERROR, "blocked"), start_time=11, end_time=19,
                     instrumentation_scope=scope),
    ]  # fmt: skip
    ours = ExportTraceServiceRequest.FromString(encode_request(queued, (fim, scope)))
    assert ours == upstream_encode(sdk)


def test_a_scalar_seen_once_is_written_directly_as_upb_would():
    """A value not in the cache (a run id, a model's tool call id) is written without
    building a upb message: the same bytes as upb's, for every scalar and edge."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

    from fim.observe.otlp_attributes import _encoded, add_attributes

    cases = [
        ("k", "text"), ("k", ""), ("", "no key"), ("ключ", "значение ✓"), ("k", True),
        ("k", False), ("k", 0), ("k", 1), ("k", -1), ("k", 2**63 - 1), ("k", -(2**63)),
        ("k", 0.0), ("k", -0.0), ("k", 1e308), ("k", float("inf")), ("k", float("nan")),
        ("k", "x" * 300), ("k", "x" * 95), ("k", "x" * 96), ("k" * 23, "v"), ("k" * 24, "v"),
        ("k" * 23, "é" * 47), ("ключ" * 3, "x" * 95), ("call", "call_" + "a" * 90),
    ]  # fmt: skip
    for key, value in cases:
        holder = PbSpan()
        add_attributes(holder.attributes, {key: value})
        assert _encoded(key, value) == holder.SerializePartialToString(), (key, value)


def test_equal_values_of_different_types_keep_their_own_encoding():
    """`True == 1 == 1.0` (and so are their hashes): an attribute's kept encoding is reused
    only for a value of the same type, so each is sent as the type it has."""
    for value in (1, True, 1.0, 1, ("stop",), ("stop",), ["stop"]):
        batch = [ReadableSpan("a", ctx(1, 7), None, None, {"x": value})]
        assert encode_spans(batch) == upstream_encode(batch), value


def _transport_of(exporter):
    return type(exporter._client._transport).__name__


def test_spans_are_posted_with_urllib3_and_the_ca_bundle_requests_uses(monkeypatch, tmp_path):
    import certifi

    from fim.observe import exporters

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                 "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example:4318")
    made = exporters.otlp_exporter()
    assert _transport_of(made) == "Urllib3HTTPTransport"
    assert made._client._transport._pool.connection_pool_kw["ca_certs"] == certifi.where()
    made.shutdown()
    # requests' own variables for its CA bundle hold as they did
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/curl-ca.pem")
    made = exporters.otlp_exporter()
    assert made._client._transport._pool.connection_pool_kw["ca_certs"] == "/etc/curl-ca.pem"
    made.shutdown()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/corporate-ca.pem")
    made = exporters.otlp_exporter()
    assert made._client._transport._pool.connection_pool_kw["ca_certs"] == "/etc/corporate-ca.pem"
    made.shutdown()


def test_a_netrc_file_keeps_the_requests_transport(monkeypatch, tmp_path):
    """requests reads a collector's credentials from netrc: with one, spans go its way."""
    from fim.observe import otlp_fast

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert otlp_fast.light_transport() is not None
    (tmp_path / ".netrc").write_text("machine collector.example login a password b\n")
    assert otlp_fast.light_transport() is None


def test_a_configured_certificate_reaches_the_urllib3_transport(monkeypatch, tmp_path):
    from fim.observe import exporters

    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a connection is made")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(ca))
    made = exporters.otlp_exporter()
    assert made._client._transport._pool.connection_pool_kw["ca_certs"] == str(ca)
    made.shutdown()


@pytest.mark.parametrize(
    "variable", ["HTTPS_PROXY", "http_proxy", "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER"]
)
def test_a_proxy_or_credential_provider_keeps_the_requests_transport(monkeypatch, variable):
    """Only requests reads proxies from the environment and credential providers' sessions:
    with one configured, spans go the upstream default way."""
    from fim.observe import otlp_fast

    monkeypatch.setenv(variable, "http://proxy.example:3128")
    assert otlp_fast.light_transport() is None


def _run_spans(direct: bool, capture: bool = False) -> tuple[Any, list[bytes]]:
    """A `RunSpans` whose children are queued serialized into the list returned: framed by
    the run itself, its chat spans serialized ahead (`direct`), or by `Sink.children_of`'s
    closure from their attribute dicts."""
    from types import SimpleNamespace

    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.trace import SpanKind

    from fim.observe.otlp_attributes import joined, kept_block
    from fim.observe.otlp_spans import child_queue
    from fim.observe.run_spans import RunSpans
    from fim.observe.sdk import OpenSpan

    queued: list[bytes] = []
    found = SimpleNamespace(
        emit=None, ids=RandomIdGenerator(), bits=lambda n: 0x42, capture=capture,
        direct=direct, kept_block=kept_block, joined=joined, queue=queued.append,
        children_of=lambda root: child_queue(
            root, queued.append, Status(StatusCode.UNSET), None, dict
        ),
    )  # fmt: skip
    root = OpenSpan("invoke_agent a", ctx(0xABC, 0x1), None, SpanKind.INTERNAL, 1, {})
    return RunSpans(root, None, found), queued  # type: ignore[arg-type]


@pytest.mark.parametrize("cost", [None, 0.0125])
def test_a_chat_span_serialized_ahead_is_the_span_its_attributes_make(cost):
    """A chat span's recurring attributes (operation, models, system, finish reason) are
    serialized once and joined with its counts (`Sink.direct`): the span queued is byte
    for byte the one its attribute dict makes, whatever the cache holds."""
    from fim.events import LLMCall, Usage

    def made(direct: bool) -> bytes:
        spans, queued = _run_spans(direct)
        usage = Usage(prompt_tokens=120, completion_tokens=7, cost=cost)
        call = LLMCall(
            model="gpt-x-2025", request_model="openai/gpt-x", iteration=2, usage=usage,
            duration_ms=3.5, finish_reason="tool_calls", ts=5.0,
        )  # fmt: skip
        for _ in range(2):  # the second from the cache
            spans._on_llm_call(call)
        assert queued[0] == queued[1]
        return queued[0]

    assert made(direct=True) == made(direct=False)


@pytest.mark.parametrize("capture", [False, True])
@pytest.mark.parametrize("blocked", [False, True])
def test_a_tool_span_serialized_ahead_is_the_span_its_attributes_make(capture, blocked):
    """A tool span, what the call adds later included (captured arguments and result, a
    hook's block), is the same span whether the run's chat spans are serialized ahead or
    not: byte for byte the span its attribute dict makes."""
    from fim.events import HookEvent, ToolCallEvent, ToolResultEvent

    def made(direct: bool) -> list[bytes]:
        spans, queued = _run_spans(direct, capture)
        for n in range(2):  # the second from the cache
            call_id = f"call_{n}"
            spans._on_tool_call(
                ToolCallEvent(call_id=call_id, name="write_file", arguments={"p": "x"}, ts=5.0)
            )
            if blocked:
                hook = HookEvent(
                    hook="guard", point="PreToolUse", decision="block", reason="no",
                    tool_name="write_file", call_id=call_id, ts=5.5,
                )  # fmt: skip
                spans._on_hook(hook)
            result = ToolResultEvent(
                call_id=call_id, name="write_file", content="done", is_error=blocked, ts=6.0
            )
            spans._on_tool_result(result)
        return queued

    assert made(direct=True) == made(direct=False)


@pytest.mark.parametrize("size", [0, 40, 100, 16_250, 16_400, 70_000])
def test_a_child_of_any_length_is_framed_as_the_sdk_frames_it(size):
    """A child's frame holds its length as a varint (one, two or more bytes): whatever its
    size, the request decodes to the SDK's span."""
    from opentelemetry.trace import SpanKind

    from fim.observe.otlp_spans import child_queue

    parent = ctx(0xABCDEF, 0x1234)
    fim = Resource({"service.name": "fim"})
    scope = InstrumentationScope("fim")
    queued: list[bytes] = []
    end = child_queue(parent, queued.append, Status(StatusCode.UNSET), None, dict)
    attributes = {"k": "x" * size} if size else {}
    end("t", 0x77, SpanKind.INTERNAL, 10, 20, attributes)
    sdk = [
        ReadableSpan("t", ctx(0xABCDEF, 0x77), parent, fim, attributes, start_time=10,
                     end_time=20, instrumentation_scope=scope),
    ]  # fmt: skip
    assert ExportTraceServiceRequest.FromString(encode_request(queued, (fim, scope))) == (
        upstream_encode(sdk)
    )


def test_a_folder_of_cas_keeps_the_requests_transport(monkeypatch, tmp_path):
    """requests reads a `REQUESTS_CA_BUNDLE` folder as a folder of CAs; the urllib3
    transport would load it as one file and every export would fail."""
    from fim.observe import otlp_fast

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example:4318")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path))
    assert otlp_fast.light_transport() is None
