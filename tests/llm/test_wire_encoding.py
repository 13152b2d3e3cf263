"""The model request body is encoded from cached pieces; it must stay byte for byte what
`json.dumps` of the whole request writes, whatever the messages hold and however often
they are re-sent."""

from __future__ import annotations

import json
from typing import Any

from fim.config.schema import ModelSettings
from fim.llm.base import chat_request
from fim.llm.openai_compat import OpenAICompatModel
from fim.llm.wire_request import encode_chat_request
from fim.types import Message, ToolCall, ToolSpec

TOOLS = [
    ToolSpec(
        name="calculator",
        description="Evaluate — exactly",
        parameters={"type": "object", "properties": {"expression": {"type": "string"}}},
    ),
    ToolSpec(name="noop", description="No parameters"),
]


def conversation() -> list[Message]:
    return [
        Message(role="system", content='You answer. Ünïcode "quotes" and \\ backslashes'),
        Message(role="user", content="What is 6 * 7?", name="alice"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="c1", name="calculator", arguments={"expression": "6 * 7"}),
                ToolCall(id="c2", name="noop", arguments={}, raw_arguments="{not json"),
            ],
        ),
        Message(role="tool", tool_call_id="c1", name="calculator", content="42"),
        Message(role="tool", tool_call_id="c2", content=None),
        Message(role="user", content="look", images=["data:image/png;base64,AAAA"]),
        Message(role="assistant", content=None),
    ]


def plain(messages: list[Message], tools: Any, options: dict[str, Any]) -> bytes:
    settings = ModelSettings(model="bench")
    return json.dumps(chat_request("bench", messages, tools, settings, options)).encode()


def test_the_body_is_what_json_dumps_writes_on_every_call() -> None:
    messages = conversation()
    options = {"temperature": 0.2, "response_format": {"type": "json_object"}}
    for _ in range(3):  # first encoding, then the cached pieces
        assert encode_chat_request("bench", messages, TOOLS, options) == plain(
            messages, TOOLS, options
        )
    assert encode_chat_request("bench", messages, None, {}) == plain(messages, None, {})
    assert encode_chat_request("bench", [], [], {}) == plain([], [], {})


def test_a_changed_message_is_encoded_again() -> None:
    messages = conversation()
    encode_chat_request("bench", messages, TOOLS, {})
    messages[0] = messages[0].model_copy(update={"content": "shorter"})
    messages[1].content = "changed in place"  # replaced field: the cache misses
    messages[3].name = "renamed"
    body = encode_chat_request("bench", messages, TOOLS, {})
    assert body == plain(messages, TOOLS, {})
    sent = json.loads(body)["messages"]
    assert sent[0]["content"] == "shorter" and sent[1]["content"] == "changed in place"


def test_options_that_replace_a_part_keep_their_meaning() -> None:
    model = OpenAICompatModel(
        ModelSettings(model="openai/bench", api_base="http://127.0.0.1:9/v1", api_key="x")
    )
    messages = conversation()[:2]
    body = json.loads(model._content(messages, TOOLS, {"model": "other", "tools": []}))
    assert body["model"] == "other" and body["tools"] == []
    streamed = json.loads(model._content(messages, TOOLS, {}, stream=True))
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    assert streamed["messages"][1] == {"role": "user", "content": "What is 6 * 7?", "name": "alice"}
