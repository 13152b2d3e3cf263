"""What one model call sent and got back, as its `llm_call` event keeps it when content
capture is on (`fim.run.capture` decides; newcomer-53 #2): "why did it call that tool?"
is answered by the request the model saw.

To stay small, a run's first call keeps the whole request (system prompt, the names of the
tools offered, the messages, a continued session's history included) and each later call
only the messages appended since the call before it (`since_call`), plus the tool names
when they changed; a conversation the context guard rewrote is kept whole again. Every
string is masked by the run's mask (the one masking policy) before anything is cut, and
one call's request is kept to `CAP` characters: long strings are cut with a marker, then
the oldest messages are left out, saying how many. A response, and the newest message of a
request, is kept to `CAP` too (attack-61 F6: a reply of 60 large tool calls was ~1 MB): the
arguments of the calls past it are left out, then the calls themselves, saying how many.

It runs on every call of a developer's run, so the common case is kept cheap (session 52):
a record is measured in Python (`_size`) only when one C-speed JSON encoding of it does not
already prove it is under the cap (`_fits`), and the tool calls of a response are masked
once, not again when the next request sends them back (`CallContent.answered`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from fim.engines.tool_turn import masked_args, no_mask
from fim.schema_check import MAX_NESTING
from fim.types import Message, ModelResponse, ToolCall, ToolSpec

CAP = 64 * 1024
"""Characters one call's request (and one response) is kept to."""
STRING_CAP = CAP // 4
"""Characters one string of it is kept to (a message, the system prompt, an argument)."""
MAX_TOOL_NAMES = 200
"""Tool names listed at most (a request offering more says how many more)."""


class CallContent:
    """The request and response records of one run's model calls, call after call."""

    def __init__(self, mask: Callable[[str], str]) -> None:
        self.mask = mask
        self.sent: list[Message] = []
        """The messages the previous call sent (to keep only what the next one adds)."""
        self.tools: list[str] | None = None
        self.call = 0
        """The number (`iteration`) of the previous call recorded; 0 before the first."""
        self.plain = True
        """Whether the record being built holds plain JSON values only (what a model's
        arguments parse to): `_fits` bounds nothing else."""
        self.answered: dict[int, tuple[ToolCall, str, str, bytes, dict[str, Any], bool]] = {}
        """The last response's tool calls by object id: the call, its id, name and encoded
        arguments as recorded, its record and whether the response's were all plain. The
        next request sends them back (the assistant message holds the same `ToolCall`
        objects), so they are masked and cut once; a call changed since is recorded again."""

    def request(
        self, messages: Sequence[Message], specs: Sequence[ToolSpec], call: int
    ) -> dict[str, Any]:
        """The record of the request call number `call` sends."""
        names = [spec.name for spec in specs]
        before = self.sent
        kept = (
            0 < len(before) <= len(messages)
            and self.call
            and list(messages[: len(before)]) == before  # each pair `is`, else `==`
        )
        record: dict[str, Any] = {}
        self.plain = True
        if kept:
            record["since_call"] = self.call
            new = messages[len(before) :]
            if names != self.tools:
                record["tools"] = _names(names)
        else:
            new = messages
            if new and new[0].role == "system":
                record["system"] = self._text(new[0].content or "")
                new = new[1:]
            record["tools"] = _names(names)
        self.sent, self.tools, self.call = list(messages), names, call
        record["messages"] = [self.message(m) for m in new]
        return record if self.plain and _fits(record, CAP) else _within(record)

    def response(self, response: ModelResponse) -> dict[str, Any]:
        """The record of what the model answered."""
        message = response.message
        record: dict[str, Any] = {"text": self._text(message.content) if message.content else None}
        record["finish_reason"] = response.finish_reason
        self.answered = {}
        if message.tool_calls:
            self.plain = True
            calls = [self._call(c) for c in message.tool_calls]
            for call, kept in zip(message.tool_calls, calls, strict=True):
                if call.raw_arguments is None and (encoded := _encoded(call.arguments)):
                    entry = (call, call.id, call.name, encoded, kept, self.plain)
                    self.answered[id(call)] = entry
            if self.plain and _fits([record, calls], CAP - 16):  # all of them kept
                record["tool_calls"] = calls
                return record
            record["tool_calls"], cut = _capped_calls(calls, CAP - _size(record) - 16)
            if cut:
                record["cut"] = f"{cut}: a response is kept to 64 KiB"
        return record

    def message(self, message: Message) -> dict[str, Any]:
        record: dict[str, Any] = {"role": message.role}
        if message.content:
            record["content"] = self._text(message.content)
        if message.tool_calls:
            record["tool_calls"] = [self._call(c) for c in message.tool_calls]
        if message.tool_call_id:
            record["tool_call_id"] = message.tool_call_id
        if message.name:
            record["name"] = message.name
        if message.images:  # the data itself is not kept: a base64 image is megabytes
            record["images"] = len(message.images)
        if message.audio:
            record["audio"] = len(message.audio)
        return record

    def _call(self, call: ToolCall) -> dict[str, Any]:
        entry = self.answered.get(id(call))
        if (
            entry is not None
            and entry[0] is call
            and entry[1] == call.id
            and entry[2] == call.name
            and call.raw_arguments is None
            and entry[3] == _encoded(call.arguments)  # not changed in place since either
        ):
            self.plain = self.plain and entry[5]
            return {**entry[4]}
        arguments: Any = (
            self._text(call.raw_arguments)
            if call.raw_arguments is not None
            else self._arguments(call.arguments)
        )
        return {"id": call.id, "name": self.mask(call.name), "arguments": arguments}

    def _arguments(self, arguments: dict[str, Any]) -> Any:
        """A call's arguments as `masked_args` shows them, each string cut to `STRING_CAP`.
        When their encoding proves they nest at most `MAX_NESTING` levels (no more brackets
        than that) and need no cut (no longer than `STRING_CAP`), they are masked as
        `masked_args` masks them without its walk, and copied by orjson."""
        encoded = _encoded(arguments)
        if encoded and encoded.count(b"[") + encoded.count(b"{") <= MAX_NESTING:
            if self.mask is not no_mask:
                # deferred: fim.masking is loaded by the time a mask is (`fim.run.plan`)
                from fim.masking import mask_strings

                encoded = _encoded(mask_strings(arguments, self.mask))
            if encoded and len(encoded) <= STRING_CAP:  # each string's encoding is longer
                return orjson.loads(encoded)  # plain values (a NaN reads back as null)
        return self._cut_strings(masked_args(arguments, self.mask))

    def _text(self, text: str) -> str:
        return _cut(self.mask(text))  # masked whole, then cut: no part of a secret is left

    def _cut_strings(self, value: Any) -> Any:
        if isinstance(value, str):
            return _cut(value)
        if isinstance(value, dict):
            return {key: self._cut_strings(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._cut_strings(item) for item in value]
        if type(value) not in _SCALARS:  # a tuple, an enum: `_size` measures its str()
            self.plain = False
        return value


_SCALARS = frozenset({int, float, bool, type(None)})
_OWN_TYPES_ONLY = (
    orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
"""orjson refuses (TypeError) what JSON has no type for, instead of encoding it its way."""


def _cut(text: str, limit: int = STRING_CAP) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text) - limit} more characters]"


def _encoded(value: Any) -> bytes:
    """`value` as compact JSON, b"" when orjson refuses it."""
    try:
        return orjson.dumps(value, option=_OWN_TYPES_ONLY)
    except TypeError:
        return b""


def _fits(value: Any, limit: int) -> bool:
    """Whether `_size(value)` is certainly at most `limit`, proven by one encoding in C
    instead of a walk in Python. For a plain value (strings, numbers, literals, lists,
    objects keyed by strings) `_size` is at most 3x its compact JSON's bytes: a string's
    size is at most its encoding; a number's or literal's at most 2 more than its encoding
    (`1e+22`, `1e22`), which has at least 1 byte; a list adds 2 per item and 2 where its
    encoding adds 1 per item and 1, an object 6 per key where its encoding adds 4 (by
    induction, 3x holds). False when orjson refuses the value (the caller measures it)."""
    try:
        return 3 * len(orjson.dumps(value, option=_OWN_TYPES_ONLY)) <= limit
    except TypeError:  # orjson.JSONEncodeError: a type of its own, a non-str key, too deep
        return False


def _names(names: list[str]) -> list[str]:
    if len(names) <= MAX_TOOL_NAMES:
        return names
    return [*names[:MAX_TOOL_NAMES], f"… {len(names) - MAX_TOOL_NAMES} more"]


def _within(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with its oldest messages left out while it is over `CAP` characters (the
    newest one is always kept: each of its strings is already cut to `STRING_CAP`)."""
    messages = record["messages"]
    size = _size(record)
    dropped = 0
    while size > CAP and len(messages) > 1:
        size -= _size(messages.pop(0))
        dropped += 1
    notes = [f"{dropped} earlier message(s) left out"] if dropped else []
    if size > CAP and messages and messages[-1].get("tool_calls"):
        newest = messages[-1]
        calls = newest.pop("tool_calls")
        newest["tool_calls"], cut = _capped_calls(calls, CAP - (size - _size(calls)) - 16)
        notes += [cut] if cut else []
    if notes:
        record["cut"] = f"{'; '.join(notes)}: a request is kept to 64 KiB"
    return record


def _capped_calls(calls: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], str]:
    """`calls` (tool call records) within `budget` characters: the first ones whole, then
    without their arguments, then none; and what was left out ("" when nothing was)."""
    kept: list[dict[str, Any]] = []
    size = bare = dropped = 0
    for call in calls:
        for record in (call, {**call, "arguments": None}):
            if size + _size(record) + 2 <= budget:
                kept.append(record)
                size += _size(record) + 2
                bare += record is not call
                break
        else:
            dropped += 1
    said = [f"the arguments of {bare} tool call(s)"] if bare else []
    said += [f"{dropped} more tool call(s)"] if dropped else []
    return kept, " and ".join(said) + " left out" if said else ""


def _size(value: Any) -> int:
    """About the characters `value` takes as JSON (strings counted, structure estimated)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        return sum(len(str(key)) + 6 + _size(item) for key, item in value.items()) + 2
    if isinstance(value, list):
        return sum(_size(item) + 2 for item in value) + 2
    return len(str(value))


__all__ = ["CAP", "CallContent"]
