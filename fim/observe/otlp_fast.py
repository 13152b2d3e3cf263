"""The upstream OTLP/HTTP span exporter with a cheaper span -> protobuf encoding.

The SDK's encoder (`opentelemetry-exporter-otlp-proto-common`) builds every attribute as
two nested messages passed to constructors, and upb copies each nested message again at
every level: ~24 us a 9-attribute span, the largest single cost of tracing a run. Here
the same `ExportTraceServiceRequest` is filled in place (`.add()` on the repeated fields,
assignment on the scalars), field for field what the upstream encoder makes
(tests/test_observe_otlp_fast.py decodes both). Everything else -- endpoint, headers,
compression, retries, timeouts, the request size limit, the exporter's own metrics -- is
the upstream exporter's. Values the fast path does not know (bytes, mappings, None,
subclasses, mixed sequences, out-of-range ints) go through the upstream value encoder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import _encode_key_value
from opentelemetry.exporter.otlp.proto.http._common import (
    RequestPayloadTooLargeError,
    _is_request_too_large,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

_logger = logging.getLogger(__name__)

_KINDS = {
    SpanKind.INTERNAL: PbSpan.SPAN_KIND_INTERNAL,
    SpanKind.SERVER: PbSpan.SPAN_KIND_SERVER,
    SpanKind.CLIENT: PbSpan.SPAN_KIND_CLIENT,
    SpanKind.PRODUCER: PbSpan.SPAN_KIND_PRODUCER,
    SpanKind.CONSUMER: PbSpan.SPAN_KIND_CONSUMER,
}
_HAS_IS_REMOTE = 0x100  # SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_FIELDS = {str: "string_value", bool: "bool_value", int: "int_value", float: "double_value"}
"""Exact types only: a subclass (an IntEnum, a str enum) takes the upstream path."""


def _flags(context: Any) -> int:
    return _HAS_IS_REMOTE | _IS_REMOTE if context and context.is_remote else _HAS_IS_REMOTE


def _attributes(target: Any, attributes: Any) -> None:
    """Append `attributes` to a repeated `KeyValue` field, as the upstream encoder does."""
    if not attributes:
        return
    add = target.add
    for key, value in attributes.items():
        try:
            kv = add()
            kv.key = key
            field = _FIELDS.get(type(value))
            if field is not None:
                setattr(kv.value, field, value)
                continue
            if type(value) in (list, tuple) and value:
                fields = {_FIELDS.get(type(item)) for item in value}
                if len(fields) == 1 and None not in fields:
                    name: str = fields.pop()  # type: ignore[assignment]
                    values = kv.value.array_value.values
                    for item in value:
                        setattr(values.add(), name, item)
                    continue
            del target[-1]
        except (ValueError, TypeError):  # e.g. an int beyond int64: upstream logs it
            del target[-1]
        try:  # every other value as upstream encodes it (or logs and skips it)
            target.append(_encode_key_value(key, value))
        except Exception as error:
            _logger.exception("Failed to encode key %s: %s", key, error)


_ENCODED: dict[tuple[str, type, Any], bytes] = {}
"""(key, type, value) -> a `Span` holding only that attribute, serialized. Most of a run's
attribute values recur on every span or run (operation names, models, tools, the system),
and protobuf's own rule that serialized messages concatenate into their merge lets one
`MergeFromString` add them all: ~1.7 us for seven attributes instead of ~5.8 us. The type
is in the key because `True == 1`."""

_ENCODED_MAX = 8192


def _span_attributes(out: Any, attributes: Any) -> None:
    """`_attributes(out.attributes, attributes)`, the same bytes, from `_ENCODED`."""
    if not attributes:
        return
    parts: list[bytes] = []
    for key, value in attributes.items():
        kind = type(value)
        if kind not in _FIELDS:  # a sequence or anything else: in order, the long way
            if parts:
                out.MergeFromString(b"".join(parts))
                parts.clear()
            _attributes(out.attributes, {key: value})
            continue
        cached = (key, kind, value)
        part = _ENCODED.get(cached)
        if part is None:
            holder = PbSpan()
            _attributes(holder.attributes, {key: value})
            part = holder.SerializePartialToString()
            if len(_ENCODED) >= _ENCODED_MAX:  # ids and counts never recur: stay bounded
                _ENCODED.clear()
            _ENCODED[cached] = part
        parts.append(part)
    if parts:
        out.MergeFromString(b"".join(parts))


def _span(out: Any, span: ReadableSpan) -> None:
    context = span.context
    out.trace_id = context.trace_id.to_bytes(16, "big")
    out.span_id = context.span_id.to_bytes(8, "big")
    if context.trace_state:
        out.trace_state = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
    parent = span.parent
    if parent:
        out.parent_span_id = parent.span_id.to_bytes(8, "big")
    out.name = span.name
    out.kind = _KINDS[span.kind]
    if span.start_time is not None:
        out.start_time_unix_nano = span.start_time
    if span.end_time is not None:
        out.end_time_unix_nano = span.end_time
    _span_attributes(out, span.attributes)
    for event in span.events:
        pb = out.events.add()
        pb.name = event.name
        pb.time_unix_nano = event.timestamp
        _attributes(pb.attributes, event.attributes)
        pb.dropped_attributes_count = event.dropped_attributes
    for link in span.links:
        pb = out.links.add()
        pb.trace_id = link.context.trace_id.to_bytes(16, "big")
        pb.span_id = link.context.span_id.to_bytes(8, "big")
        _attributes(pb.attributes, link.attributes)
        pb.dropped_attributes_count = link.dropped_attributes
        pb.flags = _flags(link.context)
    status = span.status
    if status is not None:
        out.status.SetInParent()
        out.status.code = status.status_code.value
        if status.description:
            out.status.message = status.description
    out.dropped_attributes_count = span.dropped_attributes
    out.dropped_events_count = span.dropped_events
    out.dropped_links_count = span.dropped_links
    out.flags = _flags(parent)


def encode_spans(spans: Iterable[ReadableSpan]) -> ExportTraceServiceRequest:
    """The request the upstream `encode_spans` makes: spans grouped by resource, then by
    instrumentation scope, each group in the order it first appears."""
    groups: dict[Any, dict[Any, list[ReadableSpan]]] = {}
    resource = scope = members = None
    for span in spans:
        # a batch is mostly one resource and scope: `is` spares their hashes (the SDK's
        # `Resource.__hash__` JSON-dumps the attributes); equal ones still share a group
        if span.resource is not resource or span.instrumentation_scope is not scope:
            resource, scope = span.resource, span.instrumentation_scope
            scopes = groups.setdefault(resource, {})
            members = scopes.setdefault(scope or None, [])
        members.append(span)  # type: ignore[union-attr]
    request = ExportTraceServiceRequest()
    for resource, scopes in groups.items():
        resource_spans = request.resource_spans.add()
        resource_spans.resource.SetInParent()
        _attributes(resource_spans.resource.attributes, resource.attributes)
        if resource.schema_url:
            resource_spans.schema_url = resource.schema_url
        for scope, members in scopes.items():
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.SetInParent()
            if scope is not None:
                scope_spans.scope.name = scope.name
                if scope.version:
                    scope_spans.scope.version = scope.version
                _attributes(scope_spans.scope.attributes, scope.attributes)
                if scope.schema_url:
                    scope_spans.schema_url = scope.schema_url
            add = scope_spans.spans.add
            for span in members:
                _span(add(), span)
    return request


class FastOTLPSpanExporter(OTLPSpanExporter):
    """`OTLPSpanExporter` whose `export` encodes with `encode_spans` above; the rest of
    the method is the upstream one (size limit, transport, the exporter's metrics)."""

    _REUSED = ("_shutdown", "_metrics", "_max_request_size", "_client")

    @classmethod
    def create(cls) -> OTLPSpanExporter:
        """This exporter, or the upstream one when its internals that `export` reuses are
        not there (another SDK version): the fast path is never a broken one."""
        made = cls()
        if all(hasattr(made, name) for name in cls._REUSED):
            return made
        made.shutdown()  # type: ignore[no-untyped-call]
        return OTLPSpanExporter()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                data = encode_spans(spans).SerializePartialToString()
            except Exception as error:
                _logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if _is_request_too_large(data, self._max_request_size):
                _logger.warning("Dropping span batch: %d bytes exceeds the limit", len(data))
                result.error = RequestPayloadTooLargeError(f"{len(data)} bytes")
                return SpanExportResult.FAILURE
            sent = self._client.export(data)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {"http.response.status_code": sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
