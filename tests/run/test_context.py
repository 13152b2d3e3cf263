"""The context guard and token counting: a long run is fitted to its budget by shortening old
tool observations first and summarising older turns second, never touching the system
prompt or the last turns and never separating a tool call from its results. Also the
`fim show agent --prompt` report and the token counter it relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fim.run.tokens
from fim.build.compile import compile_project
from fim.config.schema import ModelSettings
from fim.engines.react import ReactEngine
from fim.errors import FimError
from fim.events import ErrorEvent, Notice
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.run.context import (
    SUMMARY_PREFIX,
    ContextGuard,
    ContextOverBudget,
    context_budget,
    context_window,
    guard_for,
)
from fim.run.tokens import count_messages, count_tokens
from fim.tools.base import FunctionTool
from fim.tools.registry import ToolRegistry
from fim.types import Message, ToolCall, ToolSpec

TOOLS = [
    ToolSpec(
        name="shop_db__query",
        description="Run one read-only SQL query",
        parameters={"type": "object", "properties": {"sql": {"type": "string"}}},
    )
]


def _observation(i: int) -> str:
    rows = "\n".join(
        f'{{"id": {i * 100 + r}, "status": "shipped", "amount": {r * 7}}}' for r in range(60)
    )
    return f"order batch {i} HEAD\n{rows}\norder batch {i} TAIL"


def long_run(turns: int = 10, parallel: int = 1) -> list[Message]:
    """A system prompt, a task, then `turns` tool exchanges with large observations."""
    messages = [
        Message(role="system", content="You are the shop analyst."),
        Message(role="user", content="Find every late order of March and explain the pattern."),
    ]
    for i in range(turns):
        calls = [
            ToolCall(id=f"c{i}_{p}", name="shop_db__query", arguments={"sql": f"SELECT {i}{p}"})
            for p in range(parallel)
        ]
        messages.append(Message(role="assistant", content=None, tool_calls=calls))
        for call in calls:
            messages.append(
                Message(role="tool", content=_observation(i), tool_call_id=call.id, name=call.name)
            )
    return messages


def assert_pairs_intact(messages: list[Message]) -> None:
    """Every assistant tool call is answered right after it, every tool result has its call."""
    pending: set[str] = set()
    for msg in messages:
        if msg.role == "tool":
            assert msg.tool_call_id in pending, f"orphan tool result {msg.tool_call_id}"
            pending.discard(msg.tool_call_id)
            continue
        assert not pending, f"tool calls without results: {pending}"
        pending = {c.id for c in msg.tool_calls}
    assert not pending


async def test_a_conversation_within_budget_is_left_alone():
    messages = long_run(2)
    guard = ContextGuard(budget_tokens=100_000, summarizer=ScriptedModel([]))
    fitted, notes = await guard.fit(messages, TOOLS)
    assert fitted is messages and notes == []


async def test_old_tool_observations_are_truncated_first():
    messages = long_run(10)
    full = count_messages(messages, TOOLS)
    summarizer = ScriptedModel([])
    guard = ContextGuard(budget_tokens=int(full * 0.6), summarizer=summarizer, keep_last=4)
    fitted, notes = await guard.fit(messages, TOOLS)

    assert summarizer.requests == [], "truncation alone was enough"
    assert count_messages(fitted, TOOLS) <= guard.budget_tokens
    assert len(fitted) == len(messages)
    assert fitted[0] == messages[0] and fitted[-4:] == messages[-4:]
    first = fitted[3].content
    assert first.startswith("order batch 0 HEAD") and first.endswith("order batch 0 TAIL")
    assert "characters of this old tool result were cut" in first
    assert fitted[-3].content == messages[-3].content, "recent observations untouched"
    assert len(notes) == 1 and notes[0].startswith("context guard: shortened")
    assert messages[3].content == _observation(0), "the caller's list is not mutated"
    assert_pairs_intact(fitted)


async def test_older_turns_are_summarised_when_truncation_is_not_enough():
    messages = long_run(12)
    summary = "Checked batches 0-7: 14 late orders, all shipped by carrier B."
    summarizer = ScriptedModel([text(summary)])
    guard = ContextGuard(budget_tokens=3000, summarizer=summarizer, keep_last=4)
    fitted, notes = await guard.fit(messages, TOOLS)

    assert count_messages(fitted, TOOLS) <= 3000
    assert fitted[0] == messages[0]
    assert fitted[1].content == f"{SUMMARY_PREFIX}\n{summary}"
    assert fitted[-4:] == messages[-4:]
    assert_pairs_intact(fitted)
    assert [n.split(":")[1].split()[0] for n in notes] == ["shortened", "summarised"]
    [(request, _)] = summarizer.requests
    transcript = request[-1].content
    assert "USER: Find every late order of March" in transcript
    assert 'ASSISTANT CALLED shop_db__query({"sql": "SELECT 00"})' in transcript

    again, _ = await guard.fit(messages, TOOLS)
    assert again[1].content == fitted[1].content, "the same turns are summarised once"
    assert len(summarizer.requests) == 1


async def test_the_kept_tail_never_starts_inside_a_tool_exchange():
    messages = long_run(8, parallel=3)
    summarizer = ScriptedModel([text("earlier: batches 0-6 checked")])
    guard = ContextGuard(budget_tokens=4500, summarizer=summarizer, keep_last=2)
    fitted, notes = await guard.fit(messages, TOOLS)
    assert_pairs_intact(fitted)
    assert any("summarised" in n for n in notes)
    assert fitted[-4:] == messages[-4:], "the assistant call and all 3 results are kept"
    assert fitted[-4].tool_calls


async def test_a_failing_summarizer_drops_older_turns_and_says_so():
    def broken(messages, tools):
        raise TimeoutError("fast model timed out")

    guard = ContextGuard(budget_tokens=3000, summarizer=ScriptedModel([broken]), keep_last=4)
    fitted, notes = await guard.fit(long_run(12), TOOLS)
    assert "earlier messages were removed" in fitted[1].content
    assert "summarisation failed: TimeoutError" in notes[-1]
    assert_pairs_intact(fitted)
    assert count_messages(fitted, TOOLS) <= 3000


async def test_an_impossible_budget_keeps_system_and_tail_and_reports_it():
    messages = long_run(3)
    guard = ContextGuard(budget_tokens=200, summarizer=ScriptedModel([text("s")]), keep_last=4)
    with pytest.raises(ContextOverBudget) as caught:
        await guard.fit(messages, TOOLS)
    assert "still needs" in str(caught.value) and "budget of 200" in str(caught.value)
    assert "the request was not sent" in str(caught.value)


async def test_the_guard_runs_inside_the_engine_on_a_long_run():
    async def query(sql: str) -> str:
        return _observation(len(sql))

    schema = {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]}
    registry = ToolRegistry([FunctionTool("shop_db__query", "Run SQL", schema, query)])
    steps = [tool_call("shop_db__query", {"sql": "SELECT " + "x" * i}) for i in range(8)]
    worker = ScriptedModel([*steps, text("Found 3 late orders.")])
    guard = ContextGuard(
        budget_tokens=4000, summarizer=ScriptedModel([text("batches checked")] * 3), keep_last=4
    )
    engine = ReactEngine(
        model=worker,
        registry=registry,
        system_prompt="You are the shop analyst.",
        agent="analyst",
        run_id="r",
        fit_context=guard.bind(registry.specs),
    )
    events = [e async for e in engine.run("Find late orders")]
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert any("shortened" in n for n in notices)
    for messages, tools in worker.requests:
        assert count_messages(messages, tools) <= 4000
        assert messages[0].content == "You are the shop analyst."
        assert_pairs_intact(messages)
    assert events[-1].output == "Found 3 late orders."


async def test_one_huge_recent_observation_is_cut_rather_than_sent_over_budget():
    async def discover() -> str:
        return "action list " + "x " * 40_000  # a discover of a huge spec, last turn

    registry = ToolRegistry(
        [FunctionTool("connector", "Discover", {"type": "object", "properties": {}}, discover)]
    )
    worker = ScriptedModel([tool_call("connector", {}), text("done")])
    guard = ContextGuard(budget_tokens=3000, keep_last=4)
    engine = ReactEngine(
        model=worker,
        registry=registry,
        system_prompt="Hub.",
        agent="hub",
        run_id="r",
        fit_context=guard.bind(registry.specs),
    )
    events = [e async for e in engine.run("list")]
    assert events[-1].output == "done"
    for messages, tools in worker.requests:
        assert count_messages(messages, tools) <= 3000
    assert any("recent tool result" in e.message for e in events if isinstance(e, Notice))


async def test_a_turn_that_cannot_fit_fails_with_a_clear_error_and_sends_nothing():
    worker = ScriptedModel([text("never")])
    guard = ContextGuard(budget_tokens=300, keep_last=4)
    engine = ReactEngine(
        model=worker,
        registry=ToolRegistry([]),
        system_prompt="Rules. " * 400,
        agent="a",
        run_id="r",
        fit_context=guard.bind(lambda: []),
    )
    events = [e async for e in engine.run("hi")]
    assert worker.requests == []
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert errors and errors[0].kind == "context_overflow"
    assert "budget of 300" in errors[0].message and events[-1].status == "error"


def test_budget_comes_from_the_agent_else_the_model_window():
    assert context_budget("openai/gpt-4o", agent_budget=20_000) == 20_000
    assert context_window("openai/gpt-4o-mini") == 128_000
    assert context_window("anthropic/claude-sonnet-4-5") == 200_000
    assert context_window("ollama/some-new-model") == 128_000
    assert context_window("ollama/some-new-model", configured=8192) == 8192
    assert context_budget("openai/gpt-4", max_output=1000) == 8192 - 1000
    assert context_budget("openai/gpt-4o") == 128_000 - 4096


# --------------------------------------------------------------------------- tokens


def test_tokens_are_counted_with_tiktoken_offline():
    assert count_tokens("hello world") == 2
    assert count_tokens("hello world", "openai/gpt-4o") == 2
    assert count_tokens("<|endoftext|>") > 1, "special tokens in user text are plain text"
    with_tools = count_messages([Message(role="user", content="hi")], TOOLS)
    assert with_tools > count_messages([Message(role="user", content="hi")]) + 10


def test_without_an_encoding_the_count_falls_back_to_len_over_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    fim.run.tokens._encoding.cache_clear()
    try:
        assert count_tokens("x" * 40) == 10
    finally:
        monkeypatch.undo()
        fim.run.tokens._encoding.cache_clear()
    assert count_tokens("x" * 40) < 10


# --------------------------------------------------------------------------- guard_for


def test_guard_for_reads_the_agent_budget_or_the_model_settings(tmp_path: Path):
    (tmp_path / "fim.yaml").write_text("name: hub\nmodels:\n  general: openai/gpt-4o\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "hub.yaml").write_text("instructions: Help.\n")
    hub = compile_project(tmp_path)
    agent = hub.agent("hub")
    assert guard_for(hub, agent, None).budget_tokens == 128_000 - 4096
    assert (
        guard_for(hub, agent.model_copy(update={"context_budget": 9000}), None).budget_tokens
        == 9000
    )
    custom = agent.model_copy(
        update={"model": ModelSettings(model="ollama/x", context_window=32_000, max_tokens=2000)}
    )
    guard = guard_for(hub, custom, ScriptedModel([]))
    assert guard.budget_tokens == 30_000 and guard.model == "ollama/x"


async def test_the_summarizer_is_built_only_when_first_needed():
    built: list[ScriptedModel] = []

    def fast() -> ScriptedModel:
        built.append(ScriptedModel([text("batches 0-7 checked")]))
        return built[-1]

    guard = ContextGuard(budget_tokens=3000, summarizer=fast, keep_last=4)
    await guard.fit(long_run(1), TOOLS)
    assert built == [], "a run that fits never builds the fast model"
    fitted, _ = await guard.fit(long_run(12), TOOLS)
    assert len(built) == 1 and fitted[1].content.endswith("batches 0-7 checked")


async def test_a_large_conversation_is_counted_while_the_event_loop_goes_on(ticker: Any):
    """A caller's 1 MiB message costs the tokenizer ~0.2 s (worst case, one character
    repeated): counted on a thread, which tiktoken runs without the GIL, the server's
    other runs go on meanwhile."""
    guard = ContextGuard(budget_tokens=100_000, summarizer=None, keep_last=4)
    huge = [Message(role="user", content="a" * 4_000_000)]
    before = ticker.ticks
    with pytest.raises(FimError, match="after compaction"):
        await guard.fit(huge, [])
    assert ticker.ticks >= before + 3
