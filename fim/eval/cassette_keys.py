"""What identifies a recorded exchange in a cassette (`fim.eval.cassettes`): a model
request by the hash of its masked content (`request_key`), a tool call by its target, its
masked arguments and which occurrence of it it is (`tool_call`, `tool_key`)."""

from __future__ import annotations

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
