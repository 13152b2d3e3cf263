"""A `chat` span carries what the call sent and what the model answered when content
capture is asked for with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`
(newcomer-53 #2): `gen_ai.input.messages` (the whole conversation the call sent, rebuilt
from the calls' records) and `gen_ai.output.messages`, in the GenAI semantic conventions'
JSON shapes, masked and capped. Without the variable the spans carry no content, as README
promises (a trace backend may be shared), and `invoke_agent` keeps its own attributes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim import observe
from fim.build.compile import compile_project
from fim.observe.gen_ai_messages import CAP
from fim.testing.otlp import Receiver, otlp_receiver
from fim.testing.runs import run_events
from tests.engines.test_newcomer53_call_content import SECRET, project

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CHAT_ATTRIBUTES = {
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.system",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "fim.iteration",
    "fim.cost_usd",
}
"""A chat span's attributes before content capture: counts and names, no content."""


def tracing(monkeypatch: pytest.MonkeyPatch, capture: bool) -> Iterator[Receiver]:
    with otlp_receiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("SHOP_TOKEN", SECRET)
        if capture:
            monkeypatch.setenv(CAPTURE, "true")
        else:
            monkeypatch.delenv(CAPTURE, raising=False)
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
        observe.reset()
        try:
            yield rx
        finally:
            observe.reset()


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    yield from tracing(monkeypatch, capture=True)


@pytest.fixture
def uncaptured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    yield from tracing(monkeypatch, capture=False)


async def chats(root: Path, receiver: Receiver) -> list[Any]:
    await run_events(compile_project(root), "clerk", "order 7?")
    from fim.observe.tracing import flush

    assert flush()
    found = [s for s in receiver.spans if s.name.startswith("chat ")]
    return sorted(found, key=lambda s: s.start_ns)


async def test_chat_spans_carry_the_conversation_sent_and_the_answer(
    tmp_path: Path, captured: Receiver
) -> None:
    first, second = await chats(project(tmp_path), captured)
    system = "You answer questions about orders."
    assert json.loads(first.attributes["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": system}]},
        {"role": "user", "parts": [{"type": "text", "content": "order 7?"}]},
    ]
    (answer,) = json.loads(first.attributes["gen_ai.output.messages"])
    (call,) = answer["parts"]
    assert answer["role"] == "assistant" and answer["finish_reason"] == "tool_calls"
    assert call["type"] == "tool_call" and call["name"] == "lookup_order"
    assert call["arguments"] == {"id": 7}
    # the second call sent the whole conversation: the tool's result (masked) included
    sent = json.loads(second.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[3]["parts"] == [
        {"type": "tool_call_response", "id": call["id"],
         "response": "order 7: shipped; courier token ***"}
    ]  # fmt: skip
    assert json.loads(second.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Order 7 shipped."}],
         "finish_reason": "stop"}
    ]  # fmt: skip
    assert not any(SECRET in str(s.attributes) for s in captured.spans)


async def test_without_the_variable_chat_spans_carry_no_content(
    tmp_path: Path, uncaptured: Receiver
) -> None:
    spans = await chats(project(tmp_path), uncaptured)
    assert [set(s.attributes) for s in spans] == [CHAT_ATTRIBUTES] * 2
    (agent,) = [s for s in uncaptured.spans if s.name == "invoke_agent clerk"]
    assert "gen_ai.input.messages" not in agent.attributes


async def test_fim_yaml_turning_capture_off_keeps_content_out_of_spans_too(
    tmp_path: Path, captured: Receiver
) -> None:
    root = project(tmp_path, "observability: {capture_content: false}\n")
    spans = await chats(root, captured)
    assert [set(s.attributes) for s in spans] == [CHAT_ATTRIBUTES] * 2


async def test_a_long_conversation_is_capped_on_the_span(
    tmp_path: Path, captured: Receiver
) -> None:
    script = "- tool_calls: [{name: big_report, arguments: {size: 15000}}]\n" * 6 + "- text: done\n"
    spans = await chats(project(tmp_path, script=script), captured)
    last = json.loads(spans[-1].attributes["gen_ai.input.messages"])
    assert len(spans[-1].attributes["gen_ai.input.messages"]) <= CAP
    assert last[0]["role"] == "system"  # kept; the oldest others left out
    assert last[-1]["role"] == "tool" and len(last) < 2 + 2 * 6
