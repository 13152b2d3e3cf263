"""Keeping model calls' content stays cheap without keeping less (session 52): a response's
tool calls are masked once and reused when the next request sends them back, but a call
changed since is recorded again; a record is measured in Python only when one JSON
encoding does not prove it under the cap, and that proof never passes a record over it;
arguments copied without a walk are still masked, cut and depth-checked like the rest.
"""

from __future__ import annotations

from typing import Any

import pytest

from fim.engines.call_content import CAP, STRING_CAP, CallContent, _fits, _size
from fim.engines.tool_turn import TOO_DEEP
from fim.masking.masker import Masker
from fim.types import Message, ModelResponse, ToolCall

SECRET = "sk-capture-0123456789abcdef"
mask = Masker([SECRET])


def turn(call: ToolCall) -> tuple[list[Message], ModelResponse]:
    first = [Message(role="user", content="go")]
    return first, ModelResponse(message=Message(role="assistant", tool_calls=[call]))


def sent_back(first: list[Message], call: ToolCall) -> list[Message]:
    """The next request, as `ReactEngine` builds it: the answer's own `ToolCall` objects."""
    return [
        *first,
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="done", tool_call_id=call.id, name=call.name),
    ]


def test_a_call_sent_back_unchanged_is_recorded_as_the_response_recorded_it_masked() -> None:
    call = ToolCall(id="c1", name="echo", arguments={"text": f"key {SECRET}", "n": [1, 2]})
    first, answer = turn(call)
    content = CallContent(mask)
    content.request(first, [], 1)
    answered = content.response(answer)["tool_calls"][0]
    again = content.request(sent_back(first, call), [], 2)["messages"][0]["tool_calls"][0]
    assert (
        again
        == answered
        == {"id": "c1", "name": "echo", "arguments": {"text": "key ***", "n": [1, 2]}}
    )
    assert again is not answered  # two events, two records


def test_a_call_whose_arguments_changed_in_place_since_is_not_served_stale() -> None:
    call = ToolCall(id="c1", name="echo", arguments={"text": "first"})
    first, answer = turn(call)
    content = CallContent(mask)
    content.request(first, [], 1)
    content.response(answer)
    call.arguments["text"] = f"changed {SECRET}"  # e.g. by code holding the same object
    again = content.request(sent_back(first, call), [], 2)["messages"][0]["tool_calls"][0]
    assert again["arguments"] == {"text": "changed ***"}


def test_a_call_renamed_since_is_recorded_again() -> None:
    call = ToolCall(id="c1", name="echo", arguments={})
    first, answer = turn(call)
    content = CallContent(mask)
    content.request(first, [], 1)
    content.response(answer)
    call.name = "shout"
    again = content.request(sent_back(first, call), [], 2)["messages"][0]["tool_calls"][0]
    assert again["name"] == "shout"


ADVERSARIAL: list[Any] = [
    [[[[[[[[[[]]]]]]]]]],  # empty containers: the most structure per byte
    [0] * 500,
    [1e22, 1e-05, float("nan"), float("inf"), -0.0] * 50,  # floats str() writes longer
    {"": [None, True, False]},
    [{"": {}} for _ in range(300)],
    ["é" * 10, "\u200b" * 10, '"\\' * 10],
]


@pytest.mark.parametrize("value", ADVERSARIAL)
def test_the_encoding_proof_never_passes_a_value_over_the_limit(value: Any) -> None:
    assert not _fits(value, _size(value) - 1)


def test_a_request_just_over_the_cap_still_leaves_its_oldest_messages_out() -> None:
    messages = [Message(role="user", content="x" * (STRING_CAP - 100)) for _ in range(5)]
    record = CallContent(mask).request(messages, [], 1)
    assert record["cut"].startswith("1 earlier message(s) left out")
    assert len(record["messages"]) == 4


def test_arguments_copied_without_a_walk_are_still_cut_and_depth_checked() -> None:
    deep: Any = "bottom"
    for _ in range(70):
        deep = [deep]
    brackets = "[{" * 100  # brackets inside a string: not nesting, but no proof either
    calls = [
        ToolCall(id="deep", name="echo", arguments={"v": deep}),
        ToolCall(id="long", name="echo", arguments={"v": "a" * (STRING_CAP + 10)}),
        ToolCall(id="brackets", name="echo", arguments={"v": brackets, "k": SECRET}),
    ]
    record = CallContent(mask).response(
        ModelResponse(message=Message(role="assistant", tool_calls=calls))
    )
    deep_args, long_args, bracket_args = (c["arguments"] for c in record["tool_calls"])
    assert list(deep_args) == [TOO_DEEP]
    assert long_args["v"].endswith("… [cut: 10 more characters]")
    assert bracket_args == {"v": brackets, "k": "***"}
    assert len(str(record)) < CAP + 1024
