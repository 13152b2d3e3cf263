"""OTLP `Span` messages written as bytes: a span is serialized once (ids and times packed
with `struct`, enums by identity, attributes from `fim.observe.otlp_attributes`) and
framed, never built as a upb message tree to be serialized again. fim's own spans are
serialized where they end (`child_queue`, `framed_span`); the SDK's `ReadableSpan`s by
`encode_readable`. Field order is free on the wire: a decoder merges fields as they come.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from fim.observe.otlp_attributes import BYTE, KEEP_CHARS, add_attributes, span_attributes, varint

_KINDS = {
    SpanKind.INTERNAL: PbSpan.SPAN_KIND_INTERNAL,
    SpanKind.SERVER: PbSpan.SPAN_KIND_SERVER,
    SpanKind.CLIENT: PbSpan.SPAN_KIND_CLIENT,
    SpanKind.PRODUCER: PbSpan.SPAN_KIND_PRODUCER,
    SpanKind.CONSUMER: PbSpan.SPAN_KIND_CONSUMER,
}
_HAS_IS_REMOTE = 0x100  # SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK


def _flags(context: Any) -> int:
    return _HAS_IS_REMOTE | _IS_REMOTE if context and context.is_remote else _HAS_IS_REMOTE


_KIND_FIELDS = {id(kind): b"\x30" + BYTE[value] for kind, value in _KINDS.items()}
"""id(a `SpanKind`) -> its `kind` field: an enum by identity (its hash and `.value` are
Python-level calls; the members are singletons)."""
_TIMES = struct.Struct("<BQBQ")
"""start_time_unix_nano (field 7) and end_time_unix_nano (8), both fixed64."""
_FLAGS = b"\x85\x01"  # field 16, fixed32


def field(tag: bytes, payload: bytes) -> bytes:
    """One length-delimited field: its tag, the payload's length, the payload."""
    return tag + varint(len(payload)) + payload


def encode_readable(span: ReadableSpan) -> bytes:
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
    parts = [head, _name(name), _KIND_FIELDS[id(kind)], _state(context.trace_state)]
    if start and end:
        parts.append(_TIMES.pack(0x39, start, 0x41, end))
    else:
        if start:
            parts.append(b"\x39" + start.to_bytes(8, "little"))
        if end:
            parts.append(b"\x41" + end.to_bytes(8, "little"))
    if attributes:
        parts += span_attributes(attributes)
    if events or links:  # rare (hook decisions): built by upb, appended as is
        parts.append(_events_and_links(events, links))
    if dropped != _NONE_DROPPED:
        for tag, count in zip((b"\x50", b"\x60", b"\x70"), dropped, strict=True):
            if count:
                parts += (tag, varint(count))
    if status is not None:
        parts.append(_status(status))
    parts.append(_LOCAL_FLAGS if parent is None or not parent.is_remote else _REMOTE_FLAGS)
    return b"".join(parts)


_UNSET_SEEN: list[Status] = []
"""The unset `Status` objects seen (fim's one, the SDK's): their field is `\x7a\x00`."""


def _status(status: Status) -> bytes:
    """The `status` field (the upstream encoder writes it even when unset)."""
    for unset in _UNSET_SEEN:
        if status is unset:
            return b"\x7a\x00"
    code, description = status.status_code, status.description
    if description:
        body = field(b"\x12", description.encode())
        if code is not StatusCode.UNSET:
            body += b"\x18" + BYTE[code.value]
        return field(b"\x7a", body)
    if code is StatusCode.UNSET:
        if len(_UNSET_SEEN) < 4:
            _UNSET_SEEN.append(status)
        return b"\x7a\x00"
    return b"\x7a\x02\x18\x02" if code is StatusCode.ERROR else b"\x7a\x02\x18" + BYTE[code.value]


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
            add_attributes(pb.attributes, attributes)
            continue
        pb.name = event.name
        pb.time_unix_nano = event.timestamp
        add_attributes(pb.attributes, event.attributes)
        pb.dropped_attributes_count = event.dropped_attributes
    for link in links:
        linked = out.links.add()
        linked.trace_id = link.context.trace_id.to_bytes(16, "big")
        linked.span_id = link.context.span_id.to_bytes(8, "big")
        add_attributes(linked.attributes, link.attributes)
        linked.dropped_attributes_count = link.dropped_attributes
        linked.flags = _flags(link.context)
    return out.SerializePartialToString()


_NAMES: dict[str, bytes] = {}
"""Span name -> its serialized `name` field (a run's names recur: its model, its tools)."""


def _name(name: str) -> bytes:
    """A span's `name` field, kept in `_NAMES` when short (tool names are the model's)."""
    found = _NAMES.get(name)
    if found is None:
        encoded = name.encode()
        found = b"\x2a" + varint(len(encoded)) + encoded
        if len(name) <= KEEP_CHARS:
            if len(_NAMES) >= 1024:
                _NAMES.clear()
            _NAMES[name] = found
    return found


def _state(state: Any) -> bytes:
    """The `trace_state` field, or nothing for the default (empty) state."""
    if state is DEFAULT_TRACE_STATE or not state:
        return b""
    return field(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode())


def child_prefix(parent: SpanContext) -> bytes:
    """The fields every child of `parent` (a local span) shares with it, serialized once:
    trace id, parent id (field 4), flags, trace state."""
    trace_id, span_id, _, _, state, _ = parent  # a tuple: no property calls
    # the trace id field and the parent id field (4), laid out as `_IDS` lays out a span's
    shared = _IDS.pack(
        0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x22, 0x08, span_id
    ) + _LOCAL_FLAGS  # fmt: skip
    if state is not DEFAULT_TRACE_STATE:
        shared += _state(state)
    return shared


def queue_child(
    shared: bytes,
    queue: Callable[[bytes], None],
    name: str,
    span_id: int,
    kind: SpanKind,
    start: int,
    end: int,
    attributes: Any,
    events: Sequence[Any] = (),
    status: Status | None = None,
) -> None:
    """A child span serialized and framed (as `framed_span` would frame it) into `queue`:
    `shared` (`child_prefix`), then its id, name, kind, times, attributes (serialized
    already, or a dict within the span limits), events (`(name, attributes, time)`) and
    status (None: unset). A module function, bound per run with `functools.partial`: no
    closure, no cells (`fim.observe.run_spans`)."""
    parts = [
        shared,
        _SPAN_ID.pack(0x12, 0x08, span_id),
        _NAMES.get(name) or _name(name),  # a lookup, not a call: a run's names recur
        _KIND_FIELDS[id(kind)],
        _TIMES.pack(0x39, start, 0x41, end),
    ]
    if type(attributes) is bytes:  # serialized by the caller (`Sink.direct`)
        parts.append(attributes)
    elif attributes:
        parts += span_attributes(attributes)
    if events:
        parts.append(_events_and_links(events, ()))
    parts.append(b"\x7a\x00" if status is None else _status(status))
    body = b"".join(parts)
    size = len(body)
    # a span's length is most often two varint bytes: written here, not by a call
    head = bytes((0x12, size & 0x7F | 0x80, size >> 7)) if 0x80 <= size < 0x4000 else None
    queue((head or b"\x12" + varint(size)) + body)


def child_queue(
    parent: SpanContext,
    queue: Callable[[bytes], None],
    unset: Status,
    most: int | None,
    limited: Callable[[Any], Any],
) -> Callable[..., None]:
    """How a child of `parent`, a local span, ends: `queue_child` with what it shares with
    `parent` written once (`child_prefix`); `unset` is the status meaning none, and
    `limited` cuts attributes beyond `most` (None: no limit)."""
    shared = child_prefix(parent)

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
        if type(attributes) is not bytes and most is not None and len(attributes) > most:
            attributes = limited(attributes)
        queue_child(
            shared, queue, name, span_id, kind, start, end, attributes, events,
            None if status is unset else status,
        )  # fmt: skip

    return ended


def framed_root(span: Any, end: int) -> bytes:
    """A run's or workflow's own span (`fim.observe.sdk.OpenSpan`) ended at `end`, as
    `framed_span` frames it (the same bytes, field for field in the same order): its
    context and its parent's read as the tuples they are, no property call, no keyword."""
    trace_id, span_id, _, _, state, _ = span.context
    parent = span.parent
    if parent:
        head = _IDS_PARENT.pack(
            0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, span_id,
            0x22, 0x08, parent[1],
        )  # fmt: skip
        flags = _REMOTE_FLAGS if parent[2] else _LOCAL_FLAGS
    else:
        head = _IDS.pack(0x0A, 0x10, trace_id >> 64, trace_id & _LOW64, 0x12, 0x08, span_id)
        flags = _LOCAL_FLAGS
    name = span.name
    parts = [head, _NAMES.get(name) or _name(name), _KIND_FIELDS[id(span.kind)]]
    if state is not DEFAULT_TRACE_STATE:
        parts.append(_state(state))
    parts.append(_TIMES.pack(0x39, span.start, 0x41, end))
    attributes = span.attributes
    if attributes:
        parts += span_attributes(attributes)
    if span.events:
        parts.append(_events_and_links(span.events, ()))
    parts.append(_status(span.status))
    parts.append(flags)
    body = b"".join(parts)
    return b"\x12" + varint(len(body)) + body


def framed_span(*span: Any) -> bytes:
    """`encode_span(*span)` framed as an element of `ScopeSpans.spans`: what fim's own spans
    are queued as (`fim.observe.sdk`), so the exporter's thread only joins them."""
    return field(b"\x12", encode_span(*span))
