"""Workflows inside agents: the run_workflow tool, its guards, the project check, graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fim.build.compile import build_snapshot, compile_project, load_project
from fim.build.snapshot import Snapshot
from fim.build.workflow_checks import check_agent_workflows
from fim.capabilities import CAPABILITIES
from fim.errors import ConfigError, RunError
from fim.run.services import RunContext, Services
from fim.workflows.engine import WorkflowEngine
from fim.workflows.graph import mermaid
from fim.workflows.tool import provide

CALC = """\
description: Multiply by six
inputs:
  x: {type: integer, description: The number to multiply}
nodes:
  calc: {type: tool, tool: calculator, args: {expression: "{{ inputs.x }} * 6"}}
outputs: {product: "{{ nodes.calc.output }}"}
"""

GATED = """\
description: Needs a human
nodes:
  ok: {type: human, prompt: Go?}
"""

LOOP = """\
description: Asks the clerk, who may try to start this workflow again
nodes:
  ask: {type: agent, agent: clerk, input: Do the thing}
outputs: {answer: "{{ nodes.ask.output }}"}
"""


def write_project(root: Path, clerk_script: str, offered: str = "calc, gated, loop") -> Path:
    files = {
        "fim.yaml": 'name: tools\nstate: "sqlite:///.fim/state.db"\n',
        "workflows/calc.yaml": CALC,
        "workflows/gated.yaml": GATED,
        "workflows/loop.yaml": LOOP,
        "s/clerk.yaml": clerk_script,
        "agents/clerk.yaml": (
            "model: scripted:s/clerk.yaml\ninstructions: You run workflows.\n"
            f"workflows: [{offered}]\n"
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def snapshot(tmp_path: Path) -> Snapshot:
    """Built without the project checks (which refuse `gated` here), to test that the
    runtime refuses it too."""
    return build_snapshot(load_project(write_project(tmp_path, "- text: done\n")))


def context(snapshot: Snapshot, **options: object) -> RunContext:
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    return RunContext(
        snapshot=snapshot, agent=snapshot.agent("clerk"), services=services, **options
    )


async def call(ctx: RunContext, **args: object):
    provision = provide(ctx)
    assert provision is not None
    try:
        return await provision.tools[0].run(**args)
    finally:
        await ctx.services.aclose()


def test_agents_get_one_tool_and_a_stub_per_workflow_without_human_nodes(snapshot):
    provision = provide(context(snapshot))

    assert [t.name for t in provision.tools] == ["run_workflow"]
    assert provision.pinned == ["run_workflow"]
    assert "- calc: Multiply by six (inputs: x: integer)" in provision.prompt
    assert "  - x: The number to multiply" in provision.prompt
    assert "- loop: Asks the clerk" in provision.prompt
    assert "gated" not in provision.prompt


def test_agents_without_workflows_get_nothing(snapshot):
    ctx = context(snapshot)
    ctx.agent = ctx.agent.model_copy(update={"workflows": []})
    assert provide(ctx) is None


async def test_run_workflow_returns_the_outputs(snapshot):
    result = await call(context(snapshot), name="calc", inputs={"x": 7})

    assert not result.is_error
    body = json.loads(result.content)
    assert body["status"] == "ok" and body["outputs"] == {"product": "42"}
    assert result.metadata["run_id"] == body["run_id"]


async def test_run_workflow_explains_bad_inputs_and_unknown_names(snapshot):
    bad = await call(context(snapshot), name="calc", inputs={"x": "many"})
    assert bad.is_error
    assert "input 'x' = 'many'" in bad.content and "call run_workflow again" in bad.content

    unknown = await call(context(snapshot), name="refund")
    assert unknown.is_error
    assert "no workflow named 'refund'" in unknown.content
    assert "calc, loop" in unknown.content


async def test_workflows_with_human_nodes_are_refused_inline(snapshot):
    result = await call(context(snapshot), name="gated")

    assert result.is_error
    assert "waits for a human approval" in result.content
    assert "fim workflow run gated" in result.content


async def test_a_workflow_cannot_start_itself_through_an_agent(snapshot):
    result = await call(context(snapshot, parents=("loop",), depth=1), name="loop")

    assert result.is_error
    assert "'loop' is already running above this call (loop > clerk > loop)" in result.content


async def test_depth_cap_stops_nested_calls(snapshot):
    limit = snapshot.project.max_depth
    result = await call(context(snapshot, depth=limit), name="calc", inputs={"x": 1})

    assert result.is_error
    assert f"exceeds max_depth {limit}" in result.content
    with pytest.raises(RunError, match="above max_depth"):
        async for _ in WorkflowEngine(snapshot, "calc", None, depth=limit + 1).run({"x": 1}):
            pass


async def test_recursion_through_an_agent_node_is_stopped(tmp_path, monkeypatch):
    """loop -> agent clerk -> run_workflow(loop): the clerk gets an error observation and
    answers instead; the outer run ends normally."""
    import fim.run.agent

    script = (
        "- tool_calls: [{name: run_workflow, arguments: {name: loop}}]\n"
        "- text: I cannot start loop from inside itself.\n"
    )
    snapshot = compile_project(write_project(tmp_path, script, offered="calc, loop"))
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        events = [
            e
            async for e in fim.run.agent.run_agent(
                snapshot, "clerk", "go", services=services, depth=1, parents=("loop",)
            )
        ]
        outer = WorkflowEngine(snapshot, "loop", services)
        outer_events = [e async for e in outer.run({})]
    finally:
        await services.aclose()

    result = next(e for e in events if e.type == "tool_result")
    assert result.is_error and "already running above this call" in result.content
    assert outer_events[-1].status == "ok"
    assert outer_events[-1].outputs == {"answer": "I cannot start loop from inside itself."}


async def test_engine_refuses_a_workflow_already_in_its_parents(snapshot):
    with pytest.raises(RunError, match=r"cannot start itself \(call chain: loop > clerk > loop\)"):
        async for _ in WorkflowEngine(snapshot, "loop", None, parents=("loop", "clerk")).run():
            pass


def test_project_check_flags_agents_offering_human_workflows(snapshot, tmp_path):
    problems = check_agent_workflows(snapshot)
    with pytest.raises(ConfigError) as caught:
        compile_project(tmp_path)
    [reported] = caught.value.problems
    assert str(reported).startswith("agents/clerk.yaml:3:19: "), "at the list entry"
    assert reported.message == problems[0].message

    assert len(problems) == 1
    problem = problems[0]
    assert problem.path.endswith("agents/clerk.yaml")
    assert "workflow 'gated'" in problem.message and "human node (ok)" in problem.message
    assert "fim workflow run gated" in problem.hint


def test_mermaid_graph_labels_branches_and_shapes_human_nodes(tmp_path):
    body = """\
inputs: {amount: {type: number}}
nodes:
  lookup: {type: tool, tool: calculator, args: {expression: "{{ inputs.amount }}"}}
  check: {type: condition, needs: [lookup], if: "{{ nodes.lookup.output | float > 100 }}",
          then: approve, else: refund}
  approve: {type: human, prompt: Approve?}
  refund: {type: tool, tool: calculator, needs: [approve], args: {expression: "1"}}
outputs: {r: "{{ nodes.refund.output }}"}
"""
    (tmp_path / "workflows").mkdir()
    (tmp_path / "fim.yaml").write_text("name: g\n")
    (tmp_path / "workflows" / "refund.yaml").write_text(body)
    chart = mermaid(compile_project(tmp_path).workflows["refund"], "refund")

    lines = chart.splitlines()
    assert lines[:2] == ["%% workflow refund", "flowchart TD"]
    assert '  n_check{"check<br/>if nodes.lookup.output | float #gt; 100"}' in lines
    assert '  n_approve[/"approve<br/>human approval"/]' in lines
    assert '  n_lookup["lookup<br/>tool calculator"]' in lines
    assert "  inputs --> n_lookup" in lines
    assert "  n_check -- then --> n_approve" in lines
    assert "  n_check -- else --> n_refund" in lines
    assert "  n_approve --> n_refund" in lines
    assert "  n_refund --> outputs" in lines
    assert "  class n_approve human" in lines
