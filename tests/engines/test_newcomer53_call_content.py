"""What the model was sent and answered, call by call (newcomer-53 #2): each `llm_call`
event keeps its request and response when content capture is on. The first call keeps
the system prompt, the tool names and the messages; a later call only the messages added
since (`since_call`). Everything is masked by the one masking policy and kept to 64 KiB.

Capture is on for the developer's own runs (`fim run`, `fim serve` on loopback), off for
a server on another address, and `observability.capture_content` in fim.yaml decides
when it is set; the OpenTelemetry variable turns it on too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.engines.call_content import CAP
from fim.events import LLMCall
from fim.run.agent import run_agent
from fim.run.services import Services
from fim.server import served
from fim.server.app import create_app
from fim.testing.runs import run_events
from fim.testing.server import ServerThread
from fim.types import Message
from tests.inprocess_cli import run_fim

SECRET = "sk-shop-0123456789abcdef"
SHOP = f'''\
def lookup_order(id: int) -> str:
    """Look up one order by its id."""
    return "order " + str(id) + ": shipped; courier token {SECRET}"


def big_report(size: int) -> str:
    """A report of `size` characters."""
    return "r" * size
'''


def project(root: Path, fim_yaml: str = "", script: str = "") -> Path:
    files = {
        "fim.yaml": 'name: cap\nstate: "sqlite:///.fim/state.db"\n'
        'models:\n  spare: {model: "openai/gpt-4o-mini", api_key: "${SHOP_TOKEN}"}\n' + fim_yaml,
        "hooks/shop.py": SHOP,
        # the model sees the raw tool result: only the stored request can mask it
        "agents/clerk.yaml": "description: Answers about orders\n"
        "model: scripted:clerk.script.yaml\ninstructions: You answer questions about orders.\n"
        "tools: [shop:lookup_order, shop:big_report, calculator]\nmask_observations: false\n",
        "clerk.script.yaml": script
        or "- tool_calls: [{name: lookup_order, arguments: {id: 7}}]\n- text: Order 7 shipped.\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_TOKEN", SECRET)  # a ${VAR} of fim.yaml: a secret fim knows
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)


def calls(events: list[Any]) -> list[LLMCall]:
    return [e for e in events if isinstance(e, LLMCall)]


async def events_of(root: Path, services: Services | None = None, input: Any = "order 7?") -> list:
    snapshot = compile_project(root)
    if services is None:
        return await run_events(snapshot, "clerk", input)
    try:
        return [e async for e in run_agent(snapshot, "clerk", input, services=services)]
    finally:
        await services.aclose()


def services(root: Path, local: bool) -> Services:
    return Services(root=root, state_url="sqlite:///.fim/state.db", providers=CAPABILITIES,
                    local=local)  # fmt: skip


async def test_the_first_call_keeps_the_whole_request_and_the_second_only_what_was_added(
    tmp_path: Path,
) -> None:
    first, second = calls(await events_of(project(tmp_path)))
    assert first.request == {
        "system": "You answer questions about orders.",
        "tools": ["calculator", "lookup_order", "big_report"],
        "messages": [{"role": "user", "content": "order 7?"}],
    }
    (call,) = first.response["tool_calls"]
    assert first.response["finish_reason"] == "tool_calls"
    assert (call["name"], call["arguments"]) == ("lookup_order", {"id": 7})
    # the second call: the model's tool call and the tool's result, nothing sent before
    assert second.request is not None and second.request["since_call"] == 1
    assert "system" not in second.request and "tools" not in second.request
    assistant, result = second.request["messages"]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == call["id"]
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
    assert result["content"] == "order 7: shipped; courier token ***"
    assert second.response == {"text": "Order 7 shipped.", "finish_reason": "stop"}


async def test_a_secret_the_model_was_sent_is_masked_in_the_stored_request(
    tmp_path: Path,
) -> None:
    events = await events_of(project(tmp_path))
    dumped = json.dumps([e.model_dump(mode="json") for e in calls(events)])
    assert SECRET not in dumped and "courier token ***" in dumped


async def test_a_sessions_history_is_in_the_first_request(tmp_path: Path) -> None:
    history = [
        Message(role="user", content="hello"),
        Message(role="assistant", content="Hi, how can I help?"),
        Message(role="user", content="order 7?"),
    ]
    first = calls(await events_of(project(tmp_path), input=history))[0]
    assert [m["content"] for m in first.request["messages"]] == [
        "hello",
        "Hi, how can I help?",
        "order 7?",
    ]


async def test_a_long_tool_result_is_cut_with_a_marker(tmp_path: Path) -> None:
    script = "- tool_calls: [{name: big_report, arguments: {size: 200000}}]\n- text: done\n"
    second = calls(await events_of(project(tmp_path, script=script)))[1]
    content = second.request["messages"][1]["content"]
    assert content.startswith("rrrr") and content.endswith("[cut: 183616 more characters]")
    assert len(json.dumps(second.request)) <= CAP


async def test_a_request_over_64_kib_leaves_out_its_oldest_messages_and_says_so(
    tmp_path: Path,
) -> None:
    history = [Message(role="user", content=f"{i}" * 15_000) for i in range(10)]
    history.append(Message(role="user", content="last"))
    first = calls(await events_of(project(tmp_path), input=history))[0]
    assert len(json.dumps(first.request)) <= CAP
    assert first.request["messages"][-1]["content"] == "last"
    kept = len(first.request["messages"])
    assert first.request["cut"] == (
        f"{11 - kept} earlier message(s) left out: a request is kept to 64 KiB"
    )


async def test_a_server_on_another_address_keeps_no_content(tmp_path: Path) -> None:
    root = project(tmp_path)
    events = await events_of(root, services(root, local=False))
    assert [(c.request, c.response) for c in calls(events)] == [(None, None)] * 2


async def test_fim_yaml_decides_capture_when_it_says(tmp_path: Path) -> None:
    off = project(tmp_path / "off", "observability: {capture_content: false}\n")
    assert all(c.request is None for c in calls(await events_of(off, services(off, True))))
    on = project(tmp_path / "on", "observability: {capture_content: true}\n")
    assert all(c.request for c in calls(await events_of(on, services(on, local=False))))


async def test_the_opentelemetry_variable_turns_capture_on_for_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    root = project(tmp_path)
    assert all(c.request for c in calls(await events_of(root, services(root, local=False))))


def stored_calls(url: str) -> list[dict[str, Any]]:
    run = httpx.post(f"{url}/v1/agents/clerk/runs", json={"input": "order 7?"}, timeout=30)
    assert run.status_code == 200, run.text
    shown = httpx.get(f"{url}/v1/runs/{run.json()['run_id']}", timeout=10).json()
    return [e for e in shown["data"]["events"] if e["type"] == "llm_call"]


def test_get_run_shows_each_calls_request_on_loopback_and_none_elsewhere(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    state = "sqlite:///.fim/state.db"
    for host, kept in (("127.0.0.1", True), ("0.0.0.0", False)):
        app = create_app(SnapshotHolder(compile_project(root)), served(root, state, host))
        with ServerThread(app) as srv:
            found = stored_calls(srv.url)
        assert [bool(c["request"]) for c in found] == [kept, kept], host
        if kept:
            assert found[1]["request"]["messages"][1]["content"].endswith("token ***")


def test_fim_runs_show_json_has_what_fim_run_sent(tmp_path: Path) -> None:
    root = project(tmp_path)
    done = run_fim("-p", str(root), "run", "clerk", "order 7?", cwd=root)
    assert done.returncode == 0, done.stderr
    shown = run_fim("-p", str(root), "runs", "show", "last", "--json", cwd=root)
    found = [e for e in json.loads(shown.stdout)["events"] if e["type"] == "llm_call"]
    assert found[0]["request"]["system"] == "You answer questions about orders."
    assert found[1]["request"]["messages"][1]["role"] == "tool"
    assert SECRET not in shown.stdout
