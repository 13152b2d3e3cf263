"""Span attributes as OTLP protobuf bytes, for `fim.observe.otlp_spans`.

The SDK's encoder (`opentelemetry-exporter-otlp-proto-common`) builds every attribute as
two nested messages passed to constructors, and upb copies each nested message again at
every level. Most of a run's attribute values recur on every span or run, so each is
serialized once and kept; a span's attributes are those bytes joined. Values the fast
path does not know (bytes, mappings, None, subclasses, mixed sequences, out-of-range ints)
go through the upstream value encoder, field for field what it makes
(tests/observe/test_observe_otlp_fast.py decodes both).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
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


_KEPT: dict[tuple[str, Any], tuple[type, bytes]] = {}
"""(key, value) -> the value's type and a `Span` holding only that attribute, serialized.
Most of a run's attribute values recur on every span or run (operation names, models,
tools, the system, finish reasons as a tuple), and serialized messages concatenate into
their merge, so a span's attributes are these bytes joined. The type is checked on a hit
because `True == 1 == 1.0`."""

_KEPT_MAX = 8192
KEEP_CHARS = 256
"""Longer strings are encoded each time, never kept: the values that recur are short
(names, models, operations), and a model's text (tool names, captured arguments and
results) kept 8,192 times over could hold gigabytes."""


def span_attributes(attributes: Any) -> list[bytes]:
    """The `attributes` fields of a `Span`, serialized in order: each `(key, value)` item
    looked up once in `_KEPT` (a span's encoding is mostly this loop)."""
    parts: list[bytes] = []
    append, kept = parts.append, _KEPT
    for item in attributes.items():
        try:
            found = kept.get(item)
        except TypeError:  # a list or a mapping: encoded each time
            append(_encoded(*item))
            continue
        if found is not None and found[0] is type(item[1]):
            append(found[1])
        else:
            append(_keep(item))
    return parts


def joined(attributes: Any) -> bytes:
    """`span_attributes`, as one `bytes`."""
    return b"".join(span_attributes(attributes))


_BLOCKS: dict[Any, bytes] = {}


def kept_block(key: Any, make: Callable[[Any], dict[str, Any]]) -> bytes:
    """Attributes that recur together, serialized once per distinct `key` (`make(key)`
    gives them): a chat span's operation, models, system and finish reason are one lookup
    instead of five. Bounded as `_KEPT` is (a model's names are short but unbounded)."""
    found = _BLOCKS.get(key)
    if found is None:
        found = joined(make(key))
        if sum(len(part) for part in key if type(part) is str) > KEEP_CHARS:
            return found  # a model's long tool name: encoded, never kept
        if len(_BLOCKS) >= 1024:
            _BLOCKS.clear()
        _BLOCKS[key] = found
    return found


def _keep(item: tuple[str, Any]) -> bytes:
    """`item` encoded, and kept when it can recur: a scalar or a tuple of scalars, not a
    model's long text. `_KEPT` is emptied when full (ids and counts never recur: it stays
    bounded)."""
    key, value = item
    part = _encoded(key, value)
    kind = type(value)
    if key in NEVER_RECUR:
        keep = False
    elif kind is str:
        keep = len(value) <= KEEP_CHARS
    elif kind is tuple:
        keep = all(type(i) in _FIELDS for i in value) and (
            sum(len(i) for i in value if type(i) is str) <= KEEP_CHARS
        )
    else:
        keep = kind in _FIELDS
    if keep:
        if len(_KEPT) >= _KEPT_MAX:
            _KEPT.clear()
        _KEPT[item] = (kind, part)
    return part


NEVER_RECUR = frozenset({"fim.run_id", "gen_ai.tool.call.id"})
"""Keys whose every value is new (ids): encoded, never kept (they would only fill `_KEPT`
towards its next clearing)."""


def _encoded(key: str, value: Any) -> bytes:
    """One attribute as a `Span` holding only it, serialized: a scalar written directly (a
    value seen once, such as a run id or a model's tool call id, is the common miss, and
    building it in upb cost ~3 us), anything else through upb as the upstream encoder
    builds it."""
    kind = type(value)
    if kind is str:
        data = value.encode()
        size = len(data)
        head = _SHORT_KEYS.get(key)
        if head is None and key and len(name := key.encode()) < 24:
            head = _SHORT_KEYS[key] = b"\x0a" + BYTE[len(name)] + name
        if head is not None and size < 96:  # every length fits one byte: an id, a name
            # one join, not five concatenations each copying what the last made
            return b"".join(
                (b"\x4a", BYTE[len(head) + size + 4], head, b"\x12", BYTE[size + 2], b"\x0a",
                 BYTE[size], data)
            )  # fmt: skip
        any_value = b"\x0a" + varint(size) + data
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


def number(key: str, value: Any) -> bytes:
    """`_encoded(key, value)`, a count (an int from 0 to 16,383: token counts, iterations)
    written from its key's kept head and one or two bytes, no lookup of the pair in `_KEPT`
    (counts vary from call to call) and no call below this one."""
    if type(value) is int and 0 <= value < 0x4000:
        heads = _NUMBER_HEADS.get(key) or _number_heads(key)
        if value < 0x80:
            return heads[0] + BYTE[value]
        return heads[1] + bytes((value & 0x7F | 0x80, value >> 7))
    return _encoded(key, value)


def _number_heads(key: str) -> tuple[bytes, bytes]:
    """The bytes of an int attribute named `key` before its one- or two-byte varint."""
    name = key.encode()
    pair_head = (b"\x0a" + varint(len(name)) + name if name else b"") + b"\x12"
    one, two = (
        b"\x4a" + varint(len(pair_head) + 2 + size) + pair_head + BYTE[1 + size] + b"\x18"
        for size in (1, 2)
    )
    if len(_NUMBER_HEADS) < 256:  # fim's own keys, a handful
        _NUMBER_HEADS[key] = (one, two)
    return one, two


_NUMBER_HEADS: dict[str, tuple[bytes, bytes]] = {}

_SHORT_KEYS: dict[str, bytes] = {}
"""A key of under 24 bytes -> its serialized `key` field (attribute names: a small set)."""


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
