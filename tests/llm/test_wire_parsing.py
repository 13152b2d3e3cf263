"""The response side of the wire format: `fim.llm.wire.loads` gives exactly what `json.loads`
gives, and the plain-dict path of `parse_response` exactly what the general path gives."""

from __future__ import annotations

import json

import pytest

from fim.llm.wire import _parse_general, loads, parse_response

TEXTS = [
    '{"a": 1, "a": 2}',
    "123456789012345678901234567890",
    "-9223372036854775809",
    "1e400",
    "NaN",
    "-Infinity",
    '"\\ud800"',  # a lone surrogate: json.loads keeps it
    '"a\\/b\\u00e9"',
    "0.30000000000000004",
    "  [1, 2.5, true, null] ",
    '{"x": {"y": []}}',
]
BAD = ["", "{", "1 2", "[1,]", "{'a': 1}", "nul"]


@pytest.mark.parametrize("text", TEXTS)
def test_loads_equals_json_loads(text: str) -> None:
    for raw in (text, text.encode(), text.encode("utf-16")):
        assert repr(loads(raw)) == repr(json.loads(raw))


@pytest.mark.parametrize("text", BAD)
def test_loads_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads(text)
    with pytest.raises(ValueError):
        loads(b"\xff" + text.encode())  # not UTF-8 either


def _call(fn: object, **extra: object) -> dict[str, object]:
    return {"id": "call_1", "type": "function", "function": fn, **extra}


RESPONSES: list[object] = [
    {"choices": []},
    {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "model": "m"},
    {"choices": ["text"]},
    {"choices": [{"message": "text"}]},
    {"choices": [{"message": None}], "usage": {"prompt_tokens": "3", "completion_tokens": 2.0}},
    {"choices": [{"message": {"tool_calls": "abc"}}], "usage": []},
    {"choices": [{"message": {"tool_calls": [_call(None)]}}]},
    {"choices": [{"message": {"tool_calls": [_call("fn")]}}]},
    {"choices": [{"message": {"tool_calls": ["x"]}}]},
    {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        _call({"name": "calc", "arguments": '{"expression": "6 * 7"}'}),
                        _call({"name": "calc", "arguments": {"n": 12345678901234567890123}}),
                        _call({"name": "calc", "arguments": "not json"}),
                        _call({"name": "calc", "arguments": "[1]"}),
                        _call({"name": "calc", "arguments": "  "}),
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 2}},
        "model": "served",
    },
]


@pytest.mark.parametrize("data", RESPONSES)
def test_dict_path_equals_general_path(data: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # ids made up for calls without one: the same sequence for both paths
    monkeypatch.setattr("fim.llm.wire.new_call_id", lambda: "call_made_up")
    try:
        expected = _parse_general(data, "fallback").model_dump()
    except Exception as exc:  # the same failure either way
        with pytest.raises(type(exc)):
            parse_response(data, "fallback")
        return
    assert parse_response(data, "fallback").model_dump() == expected
