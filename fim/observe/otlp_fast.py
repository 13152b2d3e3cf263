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
from collections.abc import Callable, Iterable, Sequence
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
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode
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


_ENCODED: dict[type, dict[str, dict[Any, bytes]]] = {str: {}, int: {}, float: {}, bool: {}}
"""type -> key -> value -> a `Span` holding only that attribute, serialized. Most of a
run's attribute values recur on every span or run (operation names, models, tools, the
system), and serialized messages concatenate into their merge, so a span's attributes are
these bytes joined. A table per type because `True == 1 == 1.0`."""

_ONE_STRING: dict[str, dict[Any, bytes]] = {}
"""The same for a sequence of one string (the model's finish reasons)."""

_ARRAYS: dict[tuple[str, tuple[Any, ...], tuple[type, ...]], bytes] = {}
"""(key, items, their types) -> the same, for sequences (the model's finish reasons)."""

_ENCODED_MAX = 8192
_kept = 0
"""Values in `_ENCODED` and `_ARRAYS`; both are emptied at `_ENCODED_MAX` (ids and counts
never recur: stay bounded)."""


def _span_attributes(attributes: Any) -> list[bytes]:
    """The `attributes` fields of a `Span`, serialized in order, from `_ENCODED` when the
    value is a scalar or a sequence of hashable items."""
    parts: list[bytes] = []
    append, tables = parts.append, _ENCODED
    for key, value in attributes.items():
        kind = type(value)
        table = tables.get(kind)
        if table is not None:
            values = table.get(key)
            part = values.get(value) if values is not None else None
            if part is None:
                part = _keep(table, key, value)
        elif (kind is list or kind is tuple) and len(value) == 1 and type(value[0]) is str:
            values = _ONE_STRING.get(key)  # finish reasons: one, mostly
            part = values.get(value[0]) if values is not None else None
            if part is None:
                part = _keep(_ONE_STRING, key, value[0], value)
        elif kind is list or kind is tuple:  # both encode as the same array
            try:
                array = (key, tuple(value), tuple(map(type, value)))
                part = _ARRAYS.get(array)
            except TypeError:  # an unhashable item: the long way, not kept
                part = _encoded(key, value)
            else:
                if part is None:
                    part = _ARRAYS[array] = _encoded(key, value)
                    _count()
        else:  # a mapping, bytes, a subclass: the long way, not kept
            part = _encoded(key, value)
        append(part)
    return parts


def _encoded(key: str, value: Any) -> bytes:
    holder = PbSpan()
    _attributes(holder.attributes, {key: value})
    return holder.SerializePartialToString()


def _keep(table: dict[str, dict[Any, bytes]], key: str, value: Any, encoded: Any = None) -> bytes:
    part = _encoded(key, value if encoded is None else encoded)
    _count()
    table.setdefault(key, {})[value] = part
    return part


def _count() -> None:
    global _kept
    _kept += 1
    if _kept > _ENCODED_MAX:
        _kept = 1
        for table in _ENCODED.values():
            table.clear()
        _ONE_STRING.clear()
        _ARRAYS.clear()


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _BYTE[n]
    if n < 0x4000:  # a span's length
        return bytes(((n & 0x7F) | 0x80, n >> 7))
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
    """One SDK span as a `Span` message, serialized (`encode_span` with its fields)."""
    return encode_span(
        span.name, span.context, span.parent, span.kind, span.start_time, span.end_time,
        span.attributes, span.events, span.status, span.links,
        (span.dropped_attributes, span.dropped_events, span.dropped_links),
    )  # fmt: skip


def encode_span(
    name: str,
    context: SpanContext,
    parent: SpanContext | None,
    kind: SpanKind,
    start: int | None,
    end: int | None,
    attributes: Any,
    events: Sequence[Any] = (),
    status: Status | None = None,
    links: Sequence[Any] = (),
    dropped: tuple[int, int, int] = (0, 0, 0),
) -> bytes:
    """One `Span` message, serialized: the fields the upstream encoder sets; the ids and
    the times each packed in one go, attributes from `_ENCODED` as they are (no parse, no
    copy into upb). Field order is free on the wire: a decoder merges fields as they come.
    `events` are the SDK's `Event`s or `(name, attributes, time)` tuples (fim's own spans,
    `fim.observe.sdk`)."""
    trace_id = context.trace_id
    if parent:
        head = _IDS_PARENT.pack(
            0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, context.span_id,
            0x22, 0x08, parent.span_id,
        )  # fmt: skip
    else:
        head = _IDS.pack(0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, context.span_id)
    encoded = name.encode()
    parts = [
        head,
        b"\x2a",
        _varint(len(encoded)),
        encoded,
        # an enum by identity: its hash and `.value` are Python-level calls
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
    if start and end:
        parts.append(_TIMES.pack(0x39, start, 0x41, end))
    else:
        if start:
            parts.append(b"\x39" + start.to_bytes(8, "little"))
        if end:
            parts.append(b"\x41" + end.to_bytes(8, "little"))
    if attributes:
        parts += _span_attributes(attributes)
    if events or links:  # rare (hook decisions): built by upb, appended as is
        parts.append(_events_and_links(events, links))
    if dropped != _NONE_DROPPED:
        for tag, count in zip((b"\x50", b"\x60", b"\x70"), dropped, strict=True):
            if count:
                parts += (tag, _varint(count))
    if status is not None:
        parts.append(_status(status))
    parts.append(_LOCAL_FLAGS if parent is None or not parent.is_remote else _REMOTE_FLAGS)
    return b"".join(parts)


def _status(status: Status) -> bytes:
    """The `status` field (the upstream encoder writes it even when unset)."""
    code, description = status.status_code, status.description
    if description:
        body = _field(b"\x12", description.encode())
        if code is not StatusCode.UNSET:
            body += b"\x18" + _BYTE[code.value]
        return _field(b"\x7a", body)
    if code is StatusCode.UNSET:
        return b"\x7a\x00"
    return b"\x7a\x02\x18\x02" if code is StatusCode.ERROR else b"\x7a\x02\x18" + _BYTE[code.value]


_NONE_DROPPED = (0, 0, 0)
_SPAN_ID = struct.Struct(">BBQ")
_IDS = struct.Struct(">BBQQBBQ")
"""trace_id (field 1, 16 bytes) and span_id (2, 8 bytes): tags, lengths, big-endian ids."""
_IDS_PARENT = struct.Struct(">BBQQBBQBBQ")
"""The same and parent_span_id (4, 8 bytes)."""
_LOW64 = (1 << 64) - 1
_LOCAL_FLAGS = _FLAGS + struct.pack("<I", _HAS_IS_REMOTE)
_REMOTE_FLAGS = _FLAGS + struct.pack("<I", _HAS_IS_REMOTE | _IS_REMOTE)


def _events_and_links(events: Sequence[Any], links: Sequence[Any]) -> bytes:
    out = PbSpan()
    for event in events:
        pb = out.events.add()
        if type(event) is tuple:  # fim's own: (name, attributes, time)
            pb.name, attributes, pb.time_unix_nano = event
            _attributes(pb.attributes, attributes)
            continue
        pb.name = event.name
        pb.time_unix_nano = event.timestamp
        _attributes(pb.attributes, event.attributes)
        pb.dropped_attributes_count = event.dropped_attributes
    for link in links:
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


_NAMES: dict[str, bytes] = {}
"""Span name -> its serialized `name` field (a run's names recur: its model, its tools)."""


def child_queue(
    parent: SpanContext,
    queue: Callable[[bytes], None],
    unset: Status,
    most: int | None,
    limited: Callable[[Any], Any],
) -> Callable[..., None]:
    """How a child of `parent`, a local span, ends: serialized and framed (as `framed_span`
    would) and put in `queue`. The fields every child shares with `parent` -- trace id,
    parent id, trace state, flags -- are written once; then per child its id, name, kind,
    times, attributes, events (`(name, attributes, time)`) and status (`unset`: none).
    `limited` cuts attributes beyond `most` (None: no limit)."""
    trace_id = parent.trace_id
    common = [
        _IDS_PARENT.pack(
            0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, 0,
            0x22, 0x08, parent.span_id,
        )[:18],  # the trace id field only (the span id slot is cut off)
        b"\x22\x08" + parent.span_id.to_bytes(8, "big"),
        _LOCAL_FLAGS,
    ]  # fmt: skip
    state = parent.trace_state
    if state is not DEFAULT_TRACE_STATE and state:
        common.append(_field(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode()))
    shared = b"".join(common)
    names = _NAMES

    def ended(
        name: str,
        span_id: int,
        kind: SpanKind,
        start: int,
        end: int,
        attributes: Any,
        events: Sequence[Any] = (),
        status: Status = unset,
    ) -> None:
        if most is not None and len(attributes) > most:
            attributes = limited(attributes)
        named = names.get(name)
        if named is None:
            encoded = name.encode()
            named = b"\x2a" + _varint(len(encoded)) + encoded
            if len(names) >= 1024:  # tool names are the model's: stay bounded
                names.clear()
            names[name] = named
        parts = [
            shared,
            _SPAN_ID.pack(0x12, 0x08, span_id),
            named,
            b"\x30\x03"
            if kind is SpanKind.CLIENT
            else b"\x30\x01"
            if kind is SpanKind.INTERNAL
            else b"\x30" + _BYTE[_KINDS[kind]],
            _TIMES.pack(0x39, start, 0x41, end),
        ]
        if attributes:
            parts += _span_attributes(attributes)
        if events:
            parts.append(_events_and_links(events, ()))
        parts.append(b"\x7a\x00" if status is unset else _status(status))
        body = b"".join(parts)
        queue(b"\x12" + _varint(len(body)) + body)

    return ended


def framed_span(*span: Any) -> bytes:
    """`encode_span(*span)` framed as an element of `ScopeSpans.spans`: what fim's own spans
    are queued as (`fim.observe.sdk`), so the exporter's thread only joins them."""
    return _field(b"\x12", encode_span(*span))


Home = tuple[Any, Any]
"""The resource and instrumentation scope of the spans queued as bytes."""


def encode_request(spans: Iterable[ReadableSpan | bytes], home: Home | None = None) -> bytes:
    """The serialized request the upstream `encode_spans` makes: spans grouped by
    resource, then by instrumentation scope, each group in the order it first appears.
    A span may come already serialized (`framed_span`): it belongs to `home`.

    Written as bytes, not built as a message: every message of an OTLP request is a
    length-delimited field of its parent, so each span is serialized once (`_span`) and
    framed, and its cached attribute bytes are never parsed into a message tree to be
    serialized again (the tree of a 512-span batch cost more than encoding it)."""
    if home is not None and type(spans) is list:
        try:  # the usual batch: fim's own spans only, each serialized and framed
            joined = b"".join(spans)
        except TypeError:  # a `ReadableSpan` among them
            pass
        else:
            if not joined:
                return b""
            scoped = _field(b"\x12", _head("scope", home[1]) + joined)
            return _field(b"\x0a", _head("resource", home[0]) + scoped)
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    resource = scope = members = None
    for span in spans:
        if type(span) is bytes:
            owner, owner_scope = home or (None, None)
        else:
            owner, owner_scope = span.resource, span.instrumentation_scope  # type: ignore[union-attr]
        # a batch is mostly one resource and scope: `is` spares their hashes (the SDK's
        # `Resource.__hash__` JSON-dumps the attributes); equal ones still share a group
        if owner is not resource or owner_scope is not scope:
            resource, scope = owner, owner_scope
            scopes = groups.setdefault(resource, {})
            members = scopes.setdefault(scope or None, [])
        members.append(  # type: ignore[union-attr]
            span if type(span) is bytes else _field(b"\x12", _span(span))  # type: ignore[arg-type]
        )
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

    home: Home | None = None
    """Where the spans queued as bytes belong (set by `fim.observe.sdk.provider`)."""

    @classmethod
    def create(cls) -> OTLPSpanExporter:
        """This exporter, or the upstream one when its internals that `export` reuses are
        not there (another SDK version): the fast path is never a broken one."""
        made = cls()
        if all(hasattr(made, name) for name in cls._REUSED):
            return made
        made.shutdown()  # type: ignore[no-untyped-call]
        return OTLPSpanExporter()

    def export(self, spans: Sequence[ReadableSpan | bytes]) -> SpanExportResult:
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                data = encode_request(spans, self.home)
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
