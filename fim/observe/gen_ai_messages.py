"""A chat span's `gen_ai.input.messages` and `gen_ai.output.messages` (the OpenTelemetry
GenAI semantic conventions' JSON shapes: `{"role", "parts": [{"type": "text", "content"},
{"type": "tool_call", "id", "name", "arguments"}, {"type": "tool_call_response", "id",
"response"}]}`, an output message with its `finish_reason`), built from the request and
response records an `llm_call` event keeps (`fim.engines.call_content`).

A later call's record holds only the messages added since the call before, so a run's
conversation is rebuilt call after call (`Conversation`); each attribute is kept to
`CAP` characters, the oldest messages left out first (the system message is kept).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fim.masking import mask_strings

CAP = 64 * 1024
"""Characters one attribute's JSON is kept to."""


def parts_of(record: dict[str, Any], mask: Callable[[str], str]) -> dict[str, Any]:
    """One message record as a GenAI chat message, every string in it masked: the model
    writes the call ids and tool names too (attack round 23: `call-<token>`), and what was
    masked when recorded is masked again for any secret learnt since."""
    role = record.get("role", "user")
    parts: list[dict[str, Any]] = []
    content = record.get("content")
    if content:
        if role == "tool":
            parts.append(
                {"type": "tool_call_response", "id": record.get("tool_call_id"),
                 "response": content}
            )  # fmt: skip
        else:
            parts.append({"type": "text", "content": content})
    for call in record.get("tool_calls") or ():
        parts.append(_tool_call(call))
    masked: dict[str, Any] = mask_strings({"role": role, "parts": parts}, mask, keys=False)
    return masked


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
            "arguments": call.get("arguments")}  # fmt: skip


class Conversation:
    """The input messages of a run's chat calls, rebuilt from their request records."""

    def __init__(self, mask: Callable[[str], str]) -> None:
        self.mask = mask
        self.messages: list[dict[str, Any]] = []

    def input(self, request: dict[str, Any]) -> str:
        """The `gen_ai.input.messages` of the call `request` records."""
        if "since_call" not in request:  # a whole request: the conversation starts over
            self.messages = []
            if request.get("system"):
                system = {"role": "system", "content": request["system"]}
                self.messages.append(parts_of(system, self.mask))
        self.messages += [parts_of(m, self.mask) for m in request.get("messages") or ()]
        return _within(self.messages)

    def output(self, response: dict[str, Any]) -> str:
        """The `gen_ai.output.messages` of the call's response record."""
        message = parts_of(
            {"role": "assistant", "content": response.get("text"),
             "tool_calls": response.get("tool_calls")},
            self.mask,
        )  # fmt: skip
        message["finish_reason"] = response.get("finish_reason") or "stop"
        return _within([message])


def _within(messages: list[dict[str, Any]]) -> str:
    """`messages` as JSON of at most about `CAP` characters: the oldest left out first (a
    leading system message kept), then the text cut with a marker."""
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    rest = messages[len(head) :]
    text = json.dumps(head + rest, ensure_ascii=False)
    while len(text) > CAP and len(rest) > 1:
        rest = rest[max(1, len(rest) // 4) :]  # a quarter at a time: few re-encodings
        text = json.dumps(head + rest, ensure_ascii=False)
    if len(text) > CAP:
        return f"{text[:CAP]}… [cut: {len(text) - CAP} more characters]"
    return text


__all__ = ["CAP", "Conversation", "parts_of"]
