"""The DAG engine: plans, parallel steps, invalid plans, re-plans — driven by ScriptedModel
with one function answering every role (planner, steps, analyzer, synthesis)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fim.engines.dag import DagEngine
from fim.engines.react import ReactEngine
from fim.events import Notice, PlanCreated, RunFinished, StepFinished
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.tools import FunctionTool, ToolRegistry
from fim.types import Message, ModelResponse, ToolSpec

THREE_STEPS = {
    "steps": [
        {"id": "s1", "task": "look up sales", "depends_on": []},
        {"id": "s2", "task": "look up costs", "depends_on": []},
        {"id": "s3", "task": "compute profit", "depends_on": ["s1", "s2"]},
    ]
}


async def _lookup(key: str) -> str:
    return {"sales": "100", "costs": "60"}[key]


def gathered_lookup(calls: int = 2) -> FunctionTool:
    """`lookup` that answers only once `calls` calls are in flight together: steps run one
    after the other never meet, and the first fails after 5 s (no clock is read)."""
    arrived = 0
    together = asyncio.Event()

    async def run(key: str) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == calls:
            together.set()
        async with asyncio.timeout(5):
            await together.wait()
        return await _lookup(key)

    return FunctionTool(LOOKUP.name, LOOKUP.description, LOOKUP.parameters, run)


LOOKUP = FunctionTool(
    "lookup",
    "Look a figure up",
    {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    _lookup,
)


class Roles:
    """Answers as planner / step worker / analyzer / writer, from what it is asked."""

    def __init__(self, plans: list[Any], verdicts: list[dict[str, Any]] | None = None) -> None:
        self.plans = list(plans)
        self.verdicts = list(verdicts or [{"done": True, "reason": "all there"}])
        self.asked: list[str] = []

    def __call__(self, messages: list[Message], tools: list[ToolSpec] | None) -> ModelResponse:
        system = messages[0].content or ""
        last = messages[-1]
        if system.startswith("You are the planner"):
            self.asked.append("planner")
            plan = self.plans.pop(0)
            return text(plan if isinstance(plan, str) else json.dumps(plan))
        if "check whether the results" in system:
            self.asked.append("analyzer")
            return text(json.dumps(self.verdicts.pop(0)))
        if (last.content or "").startswith("Goal:") and "Results of the steps" in last.content:
            self.asked.append("writer")
            return text("Profit is 40.")
        self.asked.append("step")
        task = system.split("Your step (")[1].split("\n")[0] if "Your step (" in system else ""
        if last.role == "tool":
            return text(f"{task} -> {last.content}")
        if "sales" in task or "costs" in task:
            return tool_call("lookup", {"key": "sales" if "sales" in task else "costs"})
        return text(f"{task} -> 40")


def dag(
    roles: Roles, calls: int, max_replans: int = 3, lookup: FunctionTool = LOOKUP
) -> tuple[DagEngine, ScriptedModel]:
    model = ScriptedModel([roles] * calls)
    base = ReactEngine(
        model=model,
        registry=ToolRegistry([lookup]),
        system_prompt="You are the finance agent.",
        agent="finance",
        run_id="r1",
    )
    return DagEngine(base=base, max_replans=max_replans), model


async def collect(engine: DagEngine, goal: str = "What is our profit?") -> list[Any]:
    return [event async for event in engine.run(goal)]


async def test_a_three_step_plan_runs_independent_steps_in_parallel():
    roles = Roles([THREE_STEPS])
    engine, model = dag(roles, calls=8, lookup=gathered_lookup(2))  # s1 and s2 must meet
    events = await collect(engine)
    plan = next(e for e in events if isinstance(e, PlanCreated))
    assert [s["id"] for s in plan.steps] == ["s1", "s2", "s3"]
    at = {(type(e).__name__, e.step): i for i, e in enumerate(events) if hasattr(e, "step")}
    assert ("StepFinished", "s1") in at and ("StepFinished", "s2") in at
    assert at[("StepStarted", "s3")] > max(at[("StepFinished", "s1")], at[("StepFinished", "s2")])
    s3_prompt = next(m for m in model.requests if "Your step (s3)" in (m[0][0].content or ""))
    assert "look up sales -> 100" in s3_prompt[0][0].content
    done = events[-1]
    assert isinstance(done, RunFinished) and done.output == "Profit is 40." and done.status == "ok"
    assert done.iterations == 8 == len(model.requests)
    model.assert_consumed()


async def test_an_invalid_plan_is_retried_once_with_the_error():
    bad = {"steps": [{"id": "s1", "task": "x", "depends_on": ["s9"]}, {"id": "s2", "task": "y"}]}
    roles = Roles([bad, THREE_STEPS])
    engine, model = dag(roles, calls=9)
    events = await collect(engine)
    retry = model.requests[1][0][-1].content
    assert "invalid" in retry and "s9" in retry
    assert events[-1].output == "Profit is 40."


async def test_two_invalid_plans_fall_back_to_react_with_a_notice():
    roles = Roles(["not json at all", '{"steps": []}'])
    model = ScriptedModel([roles, roles, text("Straight answer: 40.")])
    base = ReactEngine(
        model=model,
        registry=ToolRegistry([LOOKUP]),
        system_prompt="x",
        agent="finance",
        run_id="r1",
    )
    events = [e async for e in DagEngine(base=base).run("profit?")]
    notice = next(e for e in events if isinstance(e, Notice))
    assert notice.data == {"fallback": "react"}
    assert events[-1].output == "Straight answer: 40." and events[-1].iterations == 3
    assert [e.type for e in events].count("run_started") == 1


async def test_the_analyzer_can_ask_for_a_re_plan():
    second = {
        "steps": [
            {"id": "s1", "task": "check refunds", "depends_on": []},
            {"id": "s2", "task": "adjust profit", "depends_on": ["s1"]},
        ]
    }
    roles = Roles(
        [THREE_STEPS, second],
        verdicts=[
            {"done": False, "reason": "refunds ignored", "missing": "refunds"},
            {"done": True, "reason": "complete"},
        ],
    )
    engine, model = dag(roles, calls=12)
    events = await collect(engine)
    plans = [e for e in events if isinstance(e, PlanCreated)]
    assert [p.round for p in plans] == [1, 2] and "refunds" in plans[1].reason
    assert {e.step for e in events if isinstance(e, StepFinished)} >= {"r2.s1", "r2.s2"}
    planner_calls = [r for r in model.requests if "planner" in (r[0][0].content or "")]
    assert "look up sales -> 100" in planner_calls[1][0][-1].content
    assert events[-1].status == "ok"
    model.assert_consumed()
