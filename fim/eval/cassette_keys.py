"""What identifies a recorded exchange in a cassette (`fim.eval.cassettes`): a model
request by the hash of its masked content (`request_key`), a tool call by its target, its
masked arguments and which occurrence of it it is (`tool_call`, `tool_key`).

A request's content holds the instructions, and they may read `now`: a cassette keeps the
`now` its recording rendered with (`recorded_now` reads it back), and a replay renders
with it (`fim.build.instruction_time`), so the request, and its key, are the recorded ones.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from typing import Any

from fim.masking import Masker
from fim.types import Message, ToolSpec


def request_key(
    model: str,
    messages: list[Message],
    tools: list[ToolSpec] | None,
    masker: Masker | None = None,
) -> str:
    payload: Any = {
        "model": model,
        "messages": [m.model_dump(exclude_none=True, exclude_defaults=True) for m in messages],
        "tools": [t.model_dump() for t in tools or []],
    }
    if masker:
        payload = masker.value(payload)
    # Tool-call ids are random per run on some providers; they carry no meaning for replay.
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    text = re.sub(r'"(id|tool_call_id)": "[^"]*"', r'"\1": ""', text)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def tool_call(name: str, arguments: dict[str, Any], masker: Masker) -> str:
    """A tool call as canonical JSON: its target's name and masked arguments (the same
    call, whatever secret it carries, is the same text: CI replays with its own keys)."""
    return json.dumps(
        [name, masker.value(arguments)], sort_keys=True, ensure_ascii=False, default=str
    )


def tool_key(call: str, occurrence: int) -> str:
    """The key of a tool call's result: the call (`tool_call`) and which occurrence of it
    in the case run it is (0, 1, ...), so repeated identical calls replay in order."""
    return "tool:" + hashlib.sha256(f"{occurrence}:{call}".encode()).hexdigest()[:24]


def recorded_now(value: Any) -> str | None:
    """The `now` a cassette says its recording rendered with (None: recorded before fim
    kept it), or ValueError: a committed file must not put other text into the prompt."""
    if value is None:
        return None
    try:
        if isinstance(value, str) and len(value) <= 40:
            _dt.datetime.fromisoformat(value)
            return value
    except ValueError:
        pass
    raise ValueError("its `now` is not an ISO 8601 time")


def reads_now(messages: list[Message], now: str) -> bool:
    """Whether the system prompt holds the date of `now`, the time the instructions
    rendered with: a replay of a cassette without a recorded `now` then missed on it."""
    return any(m.role == "system" and now[:10] in (m.content or "") for m in messages)


NOW_MISS = (
    "the instructions read `now`, and the cassette does not say the time it was recorded "
    "at (recorded before fim kept it)",
    "re-record it once with `fim eval --record`; replays then render `now` as recorded",
)
"""(why, hint) of a miss `reads_now` explains."""


def slug(name: str) -> str:
    """A suite's or case's name as its cassette's file or folder name (`order-status`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-").lower() or "case"
