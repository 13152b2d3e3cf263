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
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import _encode_key_value
from opentelemetry.exporter.otlp.proto.http._common import (
    RequestPayloadTooLargeError,
    _is_request_too_large,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

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


def _span_attributes(attributes: Any) -> list[bytes]:
    """The `attributes` fields of a `Span`, serialized in order, from `_ENCODED` when the
    value is a scalar or a sequence of hashable items (the model's finish reasons)."""
    parts: list[bytes] = []
    append, get = parts.append, _ENCODED.get
    for key, value in attributes.items():
        kind = type(value)
        try:
            if kind in _FIELDS:
                cached: tuple[Any, ...] = (key, kind, value)
            elif kind is list or kind is tuple:  # both encode as the same array
                cached = (key, list, tuple(value), tuple(map(type, value)))
            else:
                raise TypeError(kind)
            part = get(cached)
        except TypeError:  # a mapping, bytes, an unhashable item: the long way, not kept
            holder = PbSpan()
            _attributes(holder.attributes, {key: value})
            append(holder.SerializePartialToString())
            continue
        if part is None:
            holder = PbSpan()
            _attributes(holder.attributes, {key: value})
            part = holder.SerializePartialToString()
            if len(_ENCODED) >= _ENCODED_MAX:  # ids and counts never recur: stay bounded
                _ENCODED.clear()
            _ENCODED[cached] = part
        append(part)
    return parts


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_BYTE = [bytes((n,)) for n in range(0x80)]
_TIMES = struct.Struct("<BQBQ")
"""start_time_unix_nano (field 7) and end_time_unix_nano (8), both fixed64."""
_FLAGS = b"\x85\x01"  # field 16, fixed32


def _field(tag: bytes, payload: bytes) -> bytes:
    """One length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _span(span: ReadableSpan) -> bytes:
    """One `Span` message, serialized: the fields the upstream encoder sets; the ids and
    the times each packed in one go, attributes from `_ENCODED` as they are (no parse, no
    copy into upb). Field order is free on the wire: a decoder merges fields as they come."""
    context, parent = span.context, span.parent
    trace_id = context.trace_id
    if parent:
        head = _IDS_PARENT.pack(
            0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, context.span_id,
            0x22, 0x08, parent.span_id,
        )  # fmt: skip
    else:
        head = _IDS.pack(0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, context.span_id)
    name = span.name.encode()
    kind = span.kind  # by identity: an enum's hash and `.value` are Python-level calls
    parts = [
        head,
        b"\x2a",
        _varint(len(name)),
        name,
        b"\x30\x03"
        if kind is SpanKind.CLIENT
        else b"\x30\x01"
        if kind is SpanKind.INTERNAL
        else b"\x30" + _BYTE[_KINDS[kind]],
    ]
    state = context.trace_state
    if state is not DEFAULT_TRACE_STATE and state:
        text = ",".join(f"{k}={v}" for k, v in state.items()).encode()
        parts.append(_field(b"\x1a", text))
    start, end = span.start_time, span.end_time
    if start and end:
        parts.append(_TIMES.pack(0x39, start, 0x41, end))
    else:
        if start:
            parts.append(b"\x39" + start.to_bytes(8, "little"))
        if end:
            parts.append(b"\x41" + end.to_bytes(8, "little"))
    attributes = span.attributes
    if attributes:
        parts += _span_attributes(attributes)
    if span.events or span.links:  # rare (hook decisions): built by upb, appended as is
        parts.append(_events_and_links(span))
    dropped = span.dropped_attributes
    if dropped:
        parts += (b"\x50", _varint(dropped))
    dropped = span.dropped_events
    if dropped:
        parts += (b"\x60", _varint(dropped))
    dropped = span.dropped_links
    if dropped:
        parts += (b"\x70", _varint(dropped))
    status = span.status
    if status is not None:
        code, description = status.status_code, status.description
        if description:
            body = _field(b"\x12", description.encode())
            if code is not StatusCode.UNSET:
                body += b"\x18" + _BYTE[code.value]
            parts.append(_field(b"\x7a", body))
        else:
            parts.append(
                b"\x7a\x00"
                if code is StatusCode.UNSET
                else b"\x7a\x02\x18\x02"
                if code is StatusCode.ERROR
                else b"\x7a\x02\x18" + _BYTE[code.value]
            )
    parts.append(_LOCAL_FLAGS if parent is None or not parent.is_remote else _REMOTE_FLAGS)
    return b"".join(parts)


_IDS = struct.Struct(">BBQQBBQ")
"""trace_id (field 1, 16 bytes) and span_id (2, 8 bytes): tags, lengths, big-endian ids."""
_IDS_PARENT = struct.Struct(">BBQQBBQBBQ")
"""The same and parent_span_id (4, 8 bytes)."""
_LOW64 = (1 << 64) - 1
_LOCAL_FLAGS = _FLAGS + struct.pack("<I", _HAS_IS_REMOTE)
_REMOTE_FLAGS = _FLAGS + struct.pack("<I", _HAS_IS_REMOTE | _IS_REMOTE)


def _events_and_links(span: ReadableSpan) -> bytes:
    out = PbSpan()
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
    return out.SerializePartialToString()


_HEADS: dict[tuple[str, int], tuple[Any, bytes]] = {}
"""("resource" | "scope", id) -> (the object, its serialized head): the non-repeated
fields of a `ResourceSpans` (resource, schema URL) or `ScopeSpans` (scope, schema URL),
built once per resource and scope (a process has one of each, held by `_HEADS`)."""


def _head(kind: str, of: Any) -> bytes:
    key = (kind, id(of))
    found = _HEADS.get(key)
    if found is not None and found[0] is of:
        return found[1]
    if kind == "resource":
        resource_spans = ResourceSpans()
        resource_spans.resource.SetInParent()
        _attributes(resource_spans.resource.attributes, of.attributes)
        if of.schema_url:
            resource_spans.schema_url = of.schema_url
        head = resource_spans.SerializePartialToString()
    else:
        scope_spans = ScopeSpans()
        scope_spans.scope.SetInParent()
        if of is not None:
            scope_spans.scope.name = of.name
            if of.version:
                scope_spans.scope.version = of.version
            _attributes(scope_spans.scope.attributes, of.attributes)
            if of.schema_url:
                scope_spans.schema_url = of.schema_url
        head = scope_spans.SerializePartialToString()
    if len(_HEADS) >= 64:  # resources and scopes made per batch (tests): stay bounded
        _HEADS.clear()
    _HEADS[key] = (of, head)
    return head


def encode_request(spans: Iterable[ReadableSpan]) -> bytes:
    """The serialized request the upstream `encode_spans` makes: spans grouped by
    resource, then by instrumentation scope, each group in the order it first appears.

    Written as bytes, not built as a message: every message of an OTLP request is a
    length-delimited field of its parent, so each span is serialized once (`_span`) and
    framed, and its cached attribute bytes are never parsed into a message tree to be
    serialized again (the tree of a 512-span batch cost more than encoding it)."""
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    resource = scope = members = None
    for span in spans:
        # a batch is mostly one resource and scope: `is` spares their hashes (the SDK's
        # `Resource.__hash__` JSON-dumps the attributes); equal ones still share a group
        if span.resource is not resource or span.instrumentation_scope is not scope:
            resource, scope = span.resource, span.instrumentation_scope
            scopes = groups.setdefault(resource, {})
            members = scopes.setdefault(scope or None, [])
        members.append(_field(b"\x12", _span(span)))  # type: ignore[union-attr]
    request = []
    for resource, scopes in groups.items():
        body = [_head("resource", resource)]
        for scope, members in scopes.items():
            body.append(_field(b"\x12", _head("scope", scope) + b"".join(members)))
        request.append(_field(b"\x0a", b"".join(body)))
    return b"".join(request)


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
                data = encode_request(spans)
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
