"""An approval allows one call of one step: sibling DAG steps share the run id, and a model
may give their calls the same call id (`call_0`) and arguments, but a human's "yes" to one
step's call never lets a sibling step's call run (attack-66 lead).

Real parts: the DAG and ReAct engines, the agent's `confirm` hook, the SQLite state store.
The model is a test double answering each role; step `b`'s first turn waits on a gate, so
the test decides when its call reaches `confirm`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fim.engines.dag import DagEngine
from fim.engines.react import ReactEngine
from fim.events import Event, RunFinished, StepFinished
from fim.hooks import build_hooks
from fim.hooks.approval import call_binding
from fim.llm.scripted import text, tool_call
from fim.run.services import RunContext
from fim.store import Approval, Store, get_store
from fim.store.approvals import ReservedData
from fim.testing.hooks import make_context
from fim.tools import FunctionTool, ToolRegistry
from fim.tools.view import view_of
from fim.types import HookContext, Message, ModelResponse, ToolSpec

PLAN = {
    "steps": [
        {"id": "a", "task": "write the marker", "depends_on": []},
        {"id": "b", "task": "write the marker again", "depends_on": []},
    ]
}
SAME_CALL = ("sentinel", {"path": "prod"}, "call_0")
"""What both steps' first turn asks for: one tool, the same arguments, the same call id."""


class Roles:
    """Planner, analyzer, writer and step worker; step `b` asks only once `gate` is set."""

    name = "scripted"

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **_: Any
    ) -> ModelResponse:
        system, last = messages[0].content or "", messages[-1]
        if system.startswith("You are the planner"):
            return text(json.dumps(PLAN))
        if "check whether the results" in system:
            return text(json.dumps({"done": True, "reason": "done"}))
        if "Your step (" not in system:
            return text("finished")
        if last.role == "tool":
            return text(f"step result: {last.content}")
        if "Your step (b)" in system:
            await self.gate.wait()
        return tool_call(*SAME_CALL)


def sentinel() -> tuple[FunctionTool, list[dict[str, Any]]]:
    ran: list[dict[str, Any]] = []

    async def run(**args: Any) -> str:
        ran.append(args)
        return "written"

    spec = {"type": "object", "properties": {"path": {"type": "string"}}}
    return FunctionTool("sentinel", "Write a marker", spec, run, metadata={"access": "write"}), ran


def dag(ctx: RunContext, gate: asyncio.Event, tool: FunctionTool) -> DagEngine:
    base = ReactEngine(
        model=Roles(gate),  # type: ignore[arg-type]
        registry=ToolRegistry([tool]),
        call_view=lambda name, args: view_of(tool, args),  # hooks see its `access: write`
        system_prompt="You write markers.",
        agent="tester",
        run_id="run-1",
        hooks=build_hooks(ctx),
    )
    return DagEngine(base=base, max_replans=0)


async def approvals_until(store: Store, count: int) -> list[Approval]:
    """The tool approvals, oldest first, once there are `count` of them."""
    async with asyncio.timeout(20):  # a step that died must fail the test, not hang it
        while len(found := await store.list_approvals(None)) < count:
            await asyncio.sleep(0.02)
    return list(reversed(found))


def project(root: Path) -> None:
    (root / "fim.yaml").write_text("name: test\nstate: sqlite:///.fim/state.db\n")


async def collect(engine: DagEngine) -> list[Event]:
    return [event async for event in engine.run("write the marker twice")]


async def test_a_sibling_step_cannot_run_on_the_approval_given_to_another_step(
    tmp_path: Path,
) -> None:
    """Step a asks; a human approves a's call. Before a reads the decision (it polls every
    10 s) sibling b makes the same call (same run, call id `call_0`, arguments): b asks for
    its own approval instead of running on a's. a then ends (the run is cancelled) before
    using its approval: nothing ran, and a's approval is left unused, never b's."""
    project(tmp_path)
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"poll": 10}}])
    store = get_store(ctx.services)
    gate = asyncio.Event()
    tool, ran = sentinel()
    run = asyncio.create_task(collect(dag(ctx, gate, tool)))
    [asked_by_a] = await approvals_until(store, 1)
    decided = await store.decide_approval(asked_by_a.id, True, by="human")
    assert decided.changed
    gate.set()  # b's call reaches confirm now, a's approval approved and not yet used

    async with asyncio.timeout(20):
        while not ran and len(await store.list_approvals(None)) < 2:
            await asyncio.sleep(0.02)
    assert ran == [], "step b's call ran on the approval the human gave step a"
    asked_by_b = (await approvals_until(store, 2))[1]
    assert asked_by_b.status == "pending"
    assert (asked_by_a.data["step"], asked_by_b.data["step"]) == ("a", "b")

    run.cancel()  # step a ends before it reads its approval; b stops waiting
    await asyncio.gather(run, return_exceptions=True)
    left_a, left_b = (
        await store.get_approval(asked_by_a.id),
        await store.get_approval(asked_by_b.id),
    )
    assert left_a is not None and left_a.status == "approved" and left_a.consumed_at is None
    assert left_b is not None and left_b.status == "expired"  # withdrawn: nobody waits
    assert ran == []
    await ctx.services.aclose()


async def test_each_step_asks_for_its_own_call_and_one_yes_runs_one_call(
    tmp_path: Path,
) -> None:
    """b's identical call, made while a's request is still pending, does not join a's
    request: the human sees two, one for each step. Approving a's runs a's call alone; b's
    call runs only if its own request is approved (here it is denied)."""
    project(tmp_path)
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"poll": 0.02}}])
    store = get_store(ctx.services)
    gate = asyncio.Event()
    tool, ran = sentinel()
    run = asyncio.create_task(collect(dag(ctx, gate, tool)))
    [asked_by_a] = await approvals_until(store, 1)
    gate.set()  # b asks while a's request is pending
    asked_by_b = (await approvals_until(store, 2))[1]
    assert asked_by_b.id != asked_by_a.id
    assert (asked_by_a.data["step"], asked_by_b.data["step"]) == ("a", "b")
    assert (await store.decide_approval(asked_by_a.id, True, by="human")).changed
    async with asyncio.timeout(20):
        while not ran:
            await asyncio.sleep(0.02)
    assert (await store.decide_approval(asked_by_b.id, False, by="human")).changed
    events = await asyncio.wait_for(run, 20)

    assert ran == [{"path": "prod"}]  # one yes, one write
    outputs = {e.step: e.output for e in events if isinstance(e, StepFinished)}
    assert outputs["a"] == "step result: written"
    assert "a human reviewer denied the call to 'sentinel'" in outputs["b"]
    used = await store.get_approval(asked_by_a.id)
    assert used is not None and used.consumed_at is not None
    assert isinstance(events[-1], RunFinished) and events[-1].status == "ok"
    await ctx.services.aclose()


async def test_an_approval_is_bound_to_its_step_and_a_decision_cannot_rebind_it(
    tmp_path: Path,
) -> None:
    """The binding: a step's call and the same call of another step, or of no step (a
    ReAct run), are three calls. A decision's data cannot set the step it is for."""

    def context(**step: str) -> HookContext:
        return HookContext(
            point="PreToolUse",
            agent="tester",
            run_id="run-1",
            tool_name="sentinel",
            tool_args={"path": "prod"},
            metadata={"call_id": "call_0", **step},
        )

    bindings = [call_binding(context(step="a")), call_binding(context(step="b"))]
    bindings.append(call_binding(context()))
    assert [b.get("step") for b in bindings] == ["a", "b", None]
    assert len({json.dumps(b, sort_keys=True) for b in bindings}) == 3

    project(tmp_path)
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    approval_id = await store.create_approval(
        "run-1", "tester", "sentinel", {}, "asked", None, data=call_binding(context())
    )
    with pytest.raises(ReservedData) as refused:
        await store.decide_approval(approval_id, True, data={"step": "b"})
    assert refused.value.field == "step"
    store.close()
