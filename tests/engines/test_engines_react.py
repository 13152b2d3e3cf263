"""The ReAct engine, driven by ScriptedModel: what the model sees and what the trace says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fim.engines.react import ReactEngine
from fim.errors import RunError
from fim.events import (
    ErrorEvent,
    HookEvent,
    LLMCall,
    MessageEvent,
    RunFinished,
    RunStarted,
    Token,
    ToolCallEvent,
    ToolResultEvent,
)
from fim.llm.scripted import ScriptedModel, text, tool_call, tool_calls
from fim.tools import FunctionTool, ToolRegistry
from fim.types import HookContext, HookResult, Message, ToolCall

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


async def _add(a: float, b: float) -> str:
    return str(a + b)


def add_tool() -> FunctionTool:
    return FunctionTool("add", "Add two numbers", ADD_SCHEMA, _add, category="compute")


def engine(model: ScriptedModel, *tools: FunctionTool, **options: Any) -> ReactEngine:
    return ReactEngine(
        model=model,
        registry=ToolRegistry(tools or [add_tool()]),
        system_prompt="You are a test agent.",
        agent="tester",
        run_id="run1",
        **options,
    )


async def collect(eng: ReactEngine, prompt: str = "hi") -> list[Any]:
    return [event async for event in eng.run(prompt)]


def final(events: list[Any]) -> RunFinished:
    assert isinstance(events[-1], RunFinished)
    return events[-1]


def tool_messages(model: ScriptedModel, request: int) -> list[Message]:
    messages, _tools = model.requests[request]
    return [m for m in messages if m.role == "tool"]


async def test_a_direct_answer_is_one_model_call():
    model = ScriptedModel([text("Hello!")])
    events = await collect(engine(model))
    assert [e.type for e in events] == ["run_started", "llm_call", "message", "run_finished"]
    assert final(events).output == "Hello!"
    assert final(events).status == "ok"
    messages, tools = model.requests[0]
    assert messages[0].role == "system" and messages[1].content == "hi"
    assert [t.name for t in tools] == ["add"]
    model.assert_consumed()


async def test_tool_result_is_fed_back_and_usage_is_summed():
    model = ScriptedModel([tool_call("add", {"a": 2, "b": 3}), text("5")])
    events = await collect(engine(model))
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert calls[0].name == "add" and calls[0].arguments == {"a": 2, "b": 3}
    assert results[0].content == "5" and not results[0].is_error
    assert tool_messages(model, 1)[0].content == "5"
    llm_calls = [e for e in events if isinstance(e, LLMCall)]
    assert final(events).usage.total_tokens == sum(c.usage.total_tokens for c in llm_calls) > 0
    assert final(events).iterations == 2


async def test_parallel_tool_calls_run_concurrently():
    barrier = asyncio.Barrier(2)

    async def meet(who: str) -> str:
        await barrier.wait()  # deadlocks (-> timeout observation) if run one after another
        return f"{who} met"

    schema = {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}
    meet_tool = FunctionTool("meet", "Wait for the other", schema, meet)
    model = ScriptedModel(
        [tool_calls([("meet", {"who": "a"}), ("meet", {"who": "b"})]), text("ok")]
    )
    events = await collect(engine(model, meet_tool, tool_timeout=5))
    assert [m.content for m in tool_messages(model, 1)] == ["a met", "b met"]
    assert final(events).status == "ok"


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (ToolCall(id="c1", name="ad", arguments={}), "no tool named 'ad'. Available tools: add"),
        (ToolCall(id="c1", name="add", raw_arguments="{a: 1"), "not valid JSON"),
        (ToolCall(id="c1", name="add", arguments={"a": "x", "b": 1}), "invalid arguments"),
        (ToolCall(id="c1", name="add", arguments={"a": 1}), "'b' is a required property"),
    ],
)
async def test_bad_calls_become_observations_that_say_what_to_do(call: ToolCall, expected: str):
    from fim.types import ModelResponse

    step = ModelResponse(message=Message(role="assistant", tool_calls=[call]))
    model = ScriptedModel([step, text("sorry")])
    events = await collect(engine(model))
    observation = tool_messages(model, 1)[0].content
    assert expected in observation
    assert next(e for e in events if isinstance(e, ToolResultEvent)).is_error
    assert final(events).status == "ok"


async def test_a_raising_tool_and_a_hanging_tool_never_crash_the_run():
    async def boom() -> str:
        raise ValueError("database is on fire")

    async def hang() -> str:
        await asyncio.sleep(30)
        return "never"

    empty = {"type": "object", "properties": {}}
    tools = [FunctionTool("boom", "Fails", empty, boom), FunctionTool("hang", "Hangs", empty, hang)]
    model = ScriptedModel([tool_calls([("boom", {}), ("hang", {})]), text("done")])
    events = await collect(engine(model, *tools, tool_timeout=0.2))
    boom_obs, hang_obs = (m.content for m in tool_messages(model, 1))
    assert "ValueError: database is on fire" in boom_obs
    assert "timed out after 0.2s" in hang_obs
    assert final(events).output == "done"


async def test_max_iterations_ends_with_a_clear_message():
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 1}) for _ in range(3)])
    events = await collect(engine(model, max_iterations=3))
    done = final(events)
    assert done.status == "max_iterations"
    assert "Stopped after 3 iterations" in done.output
    model.assert_consumed()


async def test_one_empty_reply_is_nudged_two_end_the_run():
    model = ScriptedModel([text(""), text("Here you go")])
    events = await collect(engine(model))
    assert final(events).output == "Here you go"
    nudge = model.requests[1][0][-1]
    assert nudge.role == "user" and "empty" in (nudge.content or "")

    model = ScriptedModel([text(""), text("")])
    events = await collect(engine(model))
    assert final(events).status == "error"
    assert any(isinstance(e, ErrorEvent) and e.kind == "empty_reply" for e in events)


async def test_a_model_error_is_an_error_event_not_a_traceback():
    def fail(messages: list[Message], tools: Any) -> Any:
        raise RunError("model endpoint returned HTTP 500 after 3 attempts")

    events = await collect(engine(ScriptedModel([fail])))
    assert isinstance(events[-2], ErrorEvent) and "HTTP 500" in events[-2].message
    assert final(events).status == "error"


async def test_streaming_yields_tokens_then_the_message():
    model = ScriptedModel([text("Streaming works fine")])
    events = await collect(engine(model, stream=True))
    tokens = "".join(e.text for e in events if isinstance(e, Token))
    assert tokens == "Streaming works fine"
    assert next(e for e in events if isinstance(e, MessageEvent)).content == tokens


async def test_closing_the_stream_cancels_running_tools():
    cancelled = asyncio.Event()

    async def slow() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    tool = FunctionTool("slow", "Slow", {"type": "object", "properties": {}}, slow)
    eng = engine(ScriptedModel([tool_call("slow", {})]), tool)
    stream = eng.run("go")
    async for event in stream:
        if isinstance(event, ToolCallEvent):
            break
    consumer = asyncio.create_task(stream.__anext__())
    await asyncio.sleep(0.05)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    await stream.aclose()
    assert cancelled.is_set()


class ScriptedHooks:
    """A HookRunner that applies fixed decisions, to specify how the engine obeys hooks."""

    def __init__(self, **decisions: HookResult) -> None:
        self.decisions = decisions
        self.seen: list[HookContext] = []

    async def run(self, point: str, context: HookContext) -> tuple[HookResult, list[HookEvent]]:
        self.seen.append(context)
        result = self.decisions.get(point, HookResult())
        decision = "allow" if result.allow else "block"
        event = HookEvent(
            hook="scripted",
            point=context.point,
            decision=decision,
            tool_name=context.tool_name,
            reason=result.error,
        )
        return result, [event]


async def test_a_blocked_call_never_runs_and_the_model_reads_the_reason():
    ran: list[int] = []

    async def delete(id: int) -> str:
        ran.append(id)
        return "deleted"

    schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    tool = FunctionTool("delete", "Delete a row", schema, delete)
    hooks = ScriptedHooks(PreToolUse=HookResult(allow=False, error="deletes need approval"))
    model = ScriptedModel([tool_call("delete", {"id": 7}), text("I could not delete it.")])
    events = await collect(engine(model, tool, hooks=hooks))
    assert ran == []
    assert "deletes need approval" in tool_messages(model, 1)[0].content
    assert any(isinstance(e, HookEvent) and e.decision == "block" for e in events)


async def test_hooks_rewrite_arguments_results_and_add_session_context():
    hooks = ScriptedHooks(
        SessionStart=HookResult(additional_context="Today is a holiday."),
        PreToolUse=HookResult(modified_args={"a": 10, "b": 20}),
        PostToolUse=HookResult(modified_result="thirty"),
    )
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("30")])
    events = await collect(engine(model, hooks=hooks))
    assert model.requests[0][0][0].content.endswith("Today is a holiday.")
    assert tool_messages(model, 1)[0].content == "thirty"
    post = next(c for c in hooks.seen if c.point == "PostToolUse")
    assert post.tool_args == {"a": 10, "b": 20} and post.tool_result == "30"
    assert isinstance(events[0], RunStarted)


async def test_secrets_are_masked_in_every_event():
    async def leak() -> str:
        return "token=s3cr3t-value"

    tool = FunctionTool("leak", "Leaks", {"type": "object", "properties": {}}, leak)
    model = ScriptedModel([tool_call("leak", {}), text("the token is s3cr3t-value")])
    events = await collect(engine(model, tool, mask=lambda s: s.replace("s3cr3t-value", "***")))
    dumped = "".join(e.model_dump_json() for e in events)
    assert "s3cr3t-value" not in dumped and "***" in dumped


async def test_a_call_whose_target_cannot_be_told_is_blocked_not_shown_as_the_wrapper():
    """Fail closed: the view resolver of a meta-tool raising must not fall back to showing
    hooks the wrapper (a guard matched on the target would never see the call)."""
    from fim.tools.view import view_of

    ran: list[dict] = []

    async def wrapper(**args: Any) -> str:
        ran.append(args)
        return "ran"

    def broken_view(args: dict) -> Any:
        raise KeyError("server")

    tool = FunctionTool(
        "meta", "d", {"type": "object"}, wrapper, metadata={"call_view": broken_view}
    )
    registry = ToolRegistry([tool])
    engine = ReactEngine(
        model=ScriptedModel([tool_call("meta", {"x": 1}), text("done")]),
        registry=registry,
        system_prompt="",
        agent="a",
        run_id="r",
        call_view=lambda name, args: view_of(registry.get(name), args),
    )
    events = [e async for e in engine.run("go")]
    [result] = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and "could not tell what the call to 'meta' targets" in result.content
    assert ran == []


async def test_a_turn_runs_at_most_max_calls_per_turn_and_answers_the_rest():
    """A model steered by injected text may ask for hundreds of calls at once: the first
    MAX_CALLS_PER_TURN run, every other call gets an error result (each call id answered,
    so the conversation stays valid) and the model can ask again next turn."""
    from fim.engines.tool_turn import MAX_CALLS_PER_TURN

    asked = MAX_CALLS_PER_TURN + 5
    ran: list[float] = []

    async def add(a: float, b: float) -> str:
        ran.append(a)
        return str(a + b)

    tool = FunctionTool("add", "Add two numbers", ADD_SCHEMA, add, category="compute")
    model = ScriptedModel(
        [tool_calls([("add", {"a": i, "b": 1}) for i in range(asked)]), text("done")]
    )
    events = await collect(engine(model, tool))
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert len(ran) == MAX_CALLS_PER_TURN and len(results) == asked
    refused = [r for r in results if r.is_error]
    assert len(refused) == 5 and all("not run" in r.content for r in refused)
    answered = tool_messages(model, 1)
    assert len(answered) == asked and answered[-1].content.startswith("Error: not run")
    assert final(events).output == "done"
