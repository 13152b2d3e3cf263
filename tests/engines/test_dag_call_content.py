"""A DAG run keeps what its planner, analyzer and synthesis calls sent and got back, as a
ReAct run keeps its calls' (newcomer-53 #2): "why this plan?" is answered by the request
the planner saw. Each of those calls is a conversation of its own, so each is kept whole,
masked by the run's mask; with capture off, none is kept."""

from __future__ import annotations

import asyncio
import dataclasses

from fim.events import LLMCall
from fim.masking import Masker
from tests.engines.test_engines_dag import THREE_STEPS, Roles, collect, dag

SECRET = "sk-finance-0123456789"


def captured(capture: bool) -> list[LLMCall]:

    engine, _ = dag(Roles([THREE_STEPS]), calls=8)
    engine.base = dataclasses.replace(
        engine.base,
        capture=capture,
        system_prompt=f"You are the finance agent (key {SECRET}).",
        mask=Masker([SECRET]),
    )
    events = asyncio.run(collect(engine, f"What is our profit? My key is {SECRET}"))
    return [e for e in events if isinstance(e, LLMCall)]


def test_the_planner_analyzer_and_synthesis_calls_keep_their_content_masked() -> None:
    calls = captured(True)
    planner, analyzer, writer = calls[0], calls[-2], calls[-1]
    assert planner.request["system"].startswith("You are the planner")
    assert "Goal: What is our profit?" in planner.request["messages"][0]["content"]
    assert '"s1"' in planner.response["text"] and planner.finish_reason == "stop"
    assert analyzer.request["system"].startswith("You check whether the results")
    assert writer.response["text"] == "Profit is 40."
    assert writer.request["system"].startswith("You are the finance agent")
    assert all(c.request is not None and c.response is not None for c in calls)
    kept = " ".join(str(c.request) + str(c.response) for c in calls)
    assert SECRET not in kept and "***" in kept


def test_with_capture_off_no_call_keeps_content() -> None:
    calls = captured(False)
    assert calls and all(c.request is None and c.response is None for c in calls)
