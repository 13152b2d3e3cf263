"""Newcomer 55, finding 12: `fim-model-server` served one `--answer` or a `--tool-loop`
whose arguments were always `{"id": 1}`; a per-prompt model over HTTP (real cost and
latency, tool calls with real arguments) needed a handler of one's own. `--script FILE`
answers from a scripted model's file, the `replies:` a project's `scripted:` model reads:
each conversation gets the steps of the reply its latest user message picks, in order,
with no state kept between requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.testing.model_server import OpenAIStubServer, main
from fim.testing.model_server_script import script_handler

SCRIPT = """\
replies:
  - when: "regex:(?i)where is my order (?P<id>A\\\\d+)"
    steps:
      - tool_calls: [{name: lookup_order, arguments: {order_id: A1001}}]
      - text: "Order A1001 has shipped."
  - when: {user: refund, tool_result: denied}
    steps: ["The refund was denied, so I escalated it."]
  - when: refund
    steps:
      - tool_calls: [{name: issue_refund, arguments: {order_id: A1003, amount: 450}}]
default:
  - text: "Sorry, I can only help with orders."
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[OpenAIStubServer]:
    script = tmp_path / "support.script.yaml"
    script.write_text(SCRIPT)
    stub = OpenAIStubServer(handler=script_handler(script))
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()


def ask(server: OpenAIStubServer, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "general", "messages": messages}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=10)


def reply(server: OpenAIStubServer, messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = ask(server, messages)
    assert response.status_code == 200, response.text
    message: dict[str, Any] = response.json()["choices"][0]["message"]
    return message


def test_each_prompt_gets_its_replys_steps_in_order(server: OpenAIStubServer) -> None:
    chat: list[dict[str, Any]] = [{"role": "user", "content": "Where is my order A1001?"}]
    first = reply(server, chat)
    [call] = first["tool_calls"]
    assert call["function"]["name"] == "lookup_order"
    assert json.loads(call["function"]["arguments"]) == {"order_id": "A1001"}
    chat += [first, {"role": "tool", "tool_call_id": call["id"], "content": "shipped"}]
    assert reply(server, chat)["content"] == "Order A1001 has shipped."
    # another conversation, at the same time: its own reply, from its first step
    assert reply(server, [{"role": "user", "content": "hello"}])["content"] == (
        "Sorry, I can only help with orders."
    )


def test_a_tool_result_picks_its_own_reply_and_a_used_up_reply_is_a_500(
    server: OpenAIStubServer,
) -> None:
    chat: list[dict[str, Any]] = [{"role": "user", "content": "refund A1003 please"}]
    first = reply(server, chat)
    [call] = first["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"order_id": "A1003", "amount": 450}
    chat += [first, {"role": "tool", "tool_call_id": call["id"], "content": "denied by hook"}]
    assert reply(server, chat)["content"] == "The refund was denied, so I escalated it."
    chat[-1]["content"] = "refunded"  # no `when` for this result: `refund` has no step left
    response = ask(server, chat)
    assert response.status_code == 500
    assert "the reply when 'refund' has no step left (it has 1" in response.text


def test_a_broken_script_exits_2_with_its_problems_at_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("replies:\n  - when: hi\n")
    with pytest.raises(SystemExit) as stopped:
        main(["--script", str(bad)])
    assert stopped.value.code == 2
    assert f"error: {bad}:2:5: replies.0: missing required field 'steps'" in capsys.readouterr().err
