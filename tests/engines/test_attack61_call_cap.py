"""One `llm_call`'s response is kept to 64 KiB like its request (attack-61 F6): a reply of
many large tool calls keeps the first calls whole, the next ones without their arguments,
then none, and says what it left out in `cut`. The newest message of a request (an
assistant turn of many large tool calls) is kept to the same size.
"""

from __future__ import annotations

import json

from fim.engines.call_content import CAP, CallContent
from fim.types import Message, ModelResponse, ToolCall

SECRET = "sk-attack61-0123456789"


def mask(text: str) -> str:
    return text.replace(SECRET, "***")


def big_calls(count: int, size: int = 20_000) -> list[ToolCall]:
    return [
        ToolCall(id=f"c{i}", name="echo", arguments={"x": "A" * size, "key": SECRET})
        for i in range(count)
    ]


def test_a_reply_of_sixty_large_tool_calls_is_kept_to_64_kib() -> None:
    reply = ModelResponse(message=Message(role="assistant", tool_calls=big_calls(60)))
    record = CallContent(mask).response(reply)
    assert len(json.dumps(record)) <= CAP + 1024
    calls = record["tool_calls"]
    assert calls[0]["arguments"]["x"].startswith("A" * 100)  # the first ones whole (cut)
    assert calls[0]["arguments"]["key"] == "***"
    assert any(c["arguments"] is None for c in calls)
    assert "left out: a response is kept to 64 KiB" in record["cut"]
    assert record["finish_reason"] is None


def test_thousands_of_small_calls_are_left_out_past_the_cap_and_counted() -> None:
    many = [ToolCall(id=f"c{i}", name="echo", arguments={}) for i in range(5000)]
    reply = ModelResponse(message=Message(role="assistant", tool_calls=many))
    record = CallContent(mask).response(reply)
    assert len(json.dumps(record)) <= CAP + 1024
    kept = len(record["tool_calls"])
    assert 0 < kept < 5000 and f"{5000 - kept} more tool call(s) left out" in record["cut"]


def test_a_small_reply_is_kept_whole_with_no_cut() -> None:
    reply = ModelResponse(message=Message(role="assistant", tool_calls=big_calls(2, 100)))
    record = CallContent(mask).response(reply)
    assert "cut" not in record and [c["id"] for c in record["tool_calls"]] == ["c0", "c1"]
    assert record["tool_calls"][1]["arguments"]["x"] == "A" * 100


def test_the_newest_message_of_a_request_is_kept_to_64_kib_too() -> None:
    messages = [
        Message(role="system", content="You echo."),
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=big_calls(60)),
    ]
    record = CallContent(mask).request(messages, [], 1)
    assert len(json.dumps(record)) <= CAP + 1024
    assert record["messages"][-1]["role"] == "assistant"
    assert "tool call(s) left out" in record["cut"] and "request is kept to 64 KiB" in record["cut"]
