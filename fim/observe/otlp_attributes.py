"""Span attributes as OTLP protobuf bytes, for `fim.observe.otlp_spans`.

The SDK's encoder (`opentelemetry-exporter-otlp-proto-common`) builds every attribute as
two nested messages passed to constructors, and upb copies each nested message again at
every level. Most of a run's attribute values recur on every span or run, so each is
serialized once and kept; a span's attributes are those bytes joined. Values the fast
path does not know (bytes, mappings, None, subclasses, mixed sequences, out-of-range ints)
go through the upstream value encoder, field for field what it makes
(tests/test_observe_otlp_fast.py decodes both).
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import _encode_key_value
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

_logger = logging.getLogger(__name__)

_FIELDS = {str: "string_value", bool: "bool_value", int: "int_value", float: "double_value"}
"""Exact types only: a subclass (an IntEnum, a str enum) takes the upstream path."""


def add_attributes(target: Any, attributes: Any) -> None:
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
KEEP_CHARS = 256
"""Longer strings are encoded each time, never kept: the values that recur are short
(names, models, operations), and a model's text (tool names, captured arguments and
results) kept 8,192 times over could hold gigabytes."""
_kept = 0
"""Values in `_ENCODED` and `_ARRAYS`; both are emptied at `_ENCODED_MAX` (ids and counts
never recur: stay bounded)."""


def span_attributes(attributes: Any) -> list[bytes]:
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
                    part = _encoded(key, value)
                    if sum(len(i) for i in value if type(i) is str) <= KEEP_CHARS:
                        _ARRAYS[array] = part
                        _count()
        else:  # a mapping, bytes, a subclass: the long way, not kept
            part = _encoded(key, value)
        append(part)
    return parts


def _encoded(key: str, value: Any) -> bytes:
    """One attribute as a `Span` holding only it, serialized: a scalar written directly (a
    value seen once, such as a run id or a model's tool call id, is the common miss, and
    building it in upb cost ~3 us), anything else through upb as the upstream encoder
    builds it."""
    kind = type(value)
    if kind is str:
        data = value.encode()
        any_value = b"\x0a" + varint(len(data)) + data
    elif kind is bool:
        any_value = b"\x10\x01" if value else b"\x10\x00"
    elif kind is int and -_INT64 <= value < _INT64:
        any_value = b"\x18" + varint(value & _UINT64)
    elif kind is float:
        any_value = _DOUBLE.pack(0x21, value)
    else:
        holder = PbSpan()
        add_attributes(holder.attributes, {key: value})
        return holder.SerializePartialToString()
    name = key.encode()
    pair = (
        (b"\x0a" + varint(len(name)) + name if name else b"")
        + b"\x12"
        + varint(len(any_value))
        + any_value
    )
    return b"\x4a" + varint(len(pair)) + pair


def varint(n: int) -> bytes:
    """A protobuf varint (`n` >= 0), the one- and two-byte cases without a loop: most
    lengths of a span's fields fit in them."""
    if n < 0x80:
        return BYTE[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


BYTE = [bytes((n,)) for n in range(0x80)]


_INT64 = 1 << 63
_UINT64 = (1 << 64) - 1
_DOUBLE = struct.Struct("<Bd")


def _keep(table: dict[str, dict[Any, bytes]], key: str, value: Any, encoded: Any = None) -> bytes:
    part = _encoded(key, value if encoded is None else encoded)
    if type(value) is str and len(value) > KEEP_CHARS:  # a model's long text: not kept
        return part
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
