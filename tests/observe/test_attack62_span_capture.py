"""`observability.capture_content: false` in fim.yaml keeps a run's content out of every
trace span, even when `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` asks for
it (attack-62 F1; README: "false also keeps content out of every span"). Not only the
`chat` spans: the user's input and the answer (`invoke_agent`), the tool's arguments and
its result (`execute_tool`) stay out too. The run decides once (`RunPlan.capture`) and its
engine and its span writer both follow. Without the setting, the variable puts all of it
on the spans, as before; fim.yaml's `true` puts none of it there without the variable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.testing.otlp import Receiver
from fim.testing.runs import run_events
from tests.engines.test_newcomer53_call_content import project
from tests.observe.test_newcomer53_chat_content import tracing

INPUT = "where is my order? my card is PII-INPUT-4411"
ANSWER = "Your order shipped ANSWER-MARK-9."
SCRIPT = f"- tool_calls: [{{name: lookup_order, arguments: {{id: 73519}}}}]\n- text: {ANSWER}\n"
CONTENT = {
    "the user's input": "PII-INPUT-4411",
    "the final answer": "ANSWER-MARK-9",
    "the tool's arguments": "73519",
    "the tool's result": "shipped; courier token",
}
"""What the run said, heard and passed to its tool, each as text no span may carry."""
OFF = "observability: {capture_content: false}\n"
ON = "observability: {capture_content: true}\n"


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    yield from tracing(monkeypatch, capture=True)


@pytest.fixture
def uncaptured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    yield from tracing(monkeypatch, capture=False)


async def spans_of(root: Path, receiver: Receiver, fim_yaml: str = "") -> list[Any]:
    """The spans one run of `clerk` exported (`INPUT` in, a tool call, `ANSWER` out)."""
    await run_events(compile_project(project(root, fim_yaml, SCRIPT)), "clerk", INPUT)
    from fim.observe.tracing import flush  # deferred: as the tracing tests import it

    assert flush()
    return list(receiver.spans)


def found(spans: list[Any]) -> dict[str, list[str]]:
    """Which content each span holds, in its attributes or its events' attributes."""
    held: dict[str, list[str]] = {}
    for span in spans:
        texts = [str(v) for v in span.attributes.values()]
        texts += [str(v) for _, attributes in span.events for v in attributes.values()]
        for what, text in CONTENT.items():
            if any(text in t for t in texts):
                held.setdefault(what, []).append(span.name)
    return held


async def test_fim_yaml_false_keeps_all_content_out_of_every_span(
    tmp_path: Path, captured: Receiver
) -> None:
    spans = await spans_of(tmp_path, captured, OFF)
    assert {s.name for s in spans} >= {"invoke_agent clerk", "execute_tool lookup_order"}
    assert found(spans) == {}
    content = {"gen_ai.input.messages", "gen_ai.output.messages",
               "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}  # fmt: skip
    assert [s.name for s in spans if content & set(s.attributes)] == []


async def test_without_the_setting_the_variable_puts_content_on_the_spans(
    tmp_path: Path, captured: Receiver
) -> None:
    held = found(await spans_of(tmp_path, captured))
    assert "invoke_agent clerk" in held["the user's input"]
    assert "invoke_agent clerk" in held["the final answer"]
    assert "execute_tool lookup_order" in held["the tool's arguments"]
    assert "execute_tool lookup_order" in held["the tool's result"]


async def test_fim_yaml_true_puts_no_content_on_spans_without_the_variable(
    tmp_path: Path, uncaptured: Receiver
) -> None:
    assert found(await spans_of(tmp_path, uncaptured, ON)) == {}
