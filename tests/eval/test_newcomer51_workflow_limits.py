"""A workflow suite's limits are measured, not assumed (newcomer51 #2 and #3).

#2: a workflow case's tokens and cost are what its model calls spent -- its `llm` nodes'
and its `agent` nodes' agents' -- each priced as its run prices it (a `price:` on its
model). `max_tokens` used to pass on "used 0", `max_cost` failed on every run, and
`max_iterations` passed on 0; each is now checked against the calls made.

#3: what a first tool call and a workflow's first run load is loaded before any case's
clock starts (asserted on what is loaded, never on durations), and a `latency_ms` check
on a case that asked no model says that it measured fim's own time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fim import schema_check
from fim.build.compile import compile_project
from fim.eval.assertions import Observed
from fim.eval.checking import OWN_TIME, check_latency
from fim.eval.results import CaseRun
from fim.eval.runner import EvalRunner
from fim.eval.warm import warm_up
from fim.events import LLMCall
from fim.run.services import Services
from fim.tools.builtin import calculator
from fim.types import Usage

TRIAGE = """\
description: Draft a reply, then ask the writer
inputs:
  text: {type: string}
nodes:
  draft: {type: llm, model: writing, prompt: "Draft a reply to: {{ inputs.text }}"}
  ask: {type: agent, agent: writer, input: "Reply to {{ inputs.text }}"}
outputs:
  result: "{{ nodes.draft.output }} / {{ nodes.ask.output }}"
"""

SUITE = """\
workflow: triage
cases:
  - name: drafts
    input: {text: "my order is late"}
    expect:
      - contains: "pass"
      - max_tokens: 1
      - max_cost: 1000
      - max_iterations: 1
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workflow with an `llm` node and an `agent` node, both on a scripted model that
    has a `price:` (scripted models cost nothing unless priced)."""
    for var in ("OPENAI_API_KEY", "FIM_MODEL", "FIM_FAST_MODEL", "CI"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "p"
    for folder in ("agents", "evals", "workflows"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\nmodels:\n"
        "  general: scripted:evals/w.script.yaml\n"
        "  writing:\n    model: scripted:evals/w.script.yaml\n"
        "    price: {input_per_mtok: 1000, output_per_mtok: 1000}\n"
    )
    (root / "evals" / "w.script.yaml").write_text('- text: "pass: a polite reply"\n')
    (root / "agents" / "writer.yaml").write_text("model: writing\ninstructions: Write.\n")
    (root / "workflows" / "triage.yaml").write_text(TRIAGE)
    (root / "evals" / "triage.yaml").write_text(SUITE)
    return root


def _run(root: Path) -> CaseRun:
    report = asyncio.run(EvalRunner(compile_project(root), suites=["triage"]).run())
    (case,) = report.suites[0].runs
    assert case.error is None, case.error
    return case


def _outcome(case: CaseRun, kind: str) -> Any:
    return next(o for o in case.outcomes if o.kind == kind)


def test_a_workflow_case_counts_the_tokens_of_its_llm_and_agent_nodes(project: Path) -> None:
    case = _run(project)
    assert case.tokens > 0
    tokens = _outcome(case, "max_tokens")
    assert tokens.passed is False
    assert tokens.message == f"expected at most 1 tokens, used {case.tokens}"


def test_a_workflow_case_is_priced_by_its_models_price(project: Path) -> None:
    case = _run(project)
    assert case.cost is not None and case.cost > 0
    cost = _outcome(case, "max_cost")
    assert cost.passed is True
    assert "cost unknown" not in cost.message


def test_max_iterations_on_a_workflow_counts_its_model_calls(project: Path) -> None:
    """One call by the `llm` node, one by the agent: two model calls, above 1."""
    case = _run(project)
    iterations = _outcome(case, "max_iterations")
    assert iterations.passed is False
    assert iterations.message == "expected at most 1 model calls, made 2"


def test_a_model_free_workflow_costs_nothing_rather_than_unknown(project: Path) -> None:
    (project / "workflows" / "triage.yaml").write_text(
        "inputs:\n  text: {type: string}\n"
        "nodes:\n  calc: {type: tool, tool: calculator, args: {expression: '6*7'}}\n"
        "outputs:\n  result: 'pass {{ nodes.calc.output }}'\n"
    )
    case = _run(project)
    assert case.tokens == 0
    assert _outcome(case, "max_cost").passed is True
    assert _outcome(case, "max_iterations").passed is True


# ------------------------------------------------------------------ #3: the warm-up


def test_the_warm_up_builds_the_argument_validator_of_each_tool_a_case_can_call(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "agents" / "writer.yaml").write_text(
        "model: writing\ninstructions: Write.\ntools: [calculator]\n"
    )
    monkeypatch.setattr(schema_check, "_VALIDATORS", {})
    snapshot = compile_project(project)
    suite = snapshot.evals["triage"]
    warm_up(snapshot, [(suite, suite.cases[0], 1)], False, None)
    held = schema_check._VALIDATORS.get(id(calculator.TOOL.parameters))
    assert held is not None and held[0] is calculator.TOOL.parameters


def test_the_warm_up_opens_the_store_a_workflow_run_is_recorded_in(project: Path) -> None:
    snapshot = compile_project(project)
    suite = snapshot.evals["triage"]
    services = Services(root=project, state_url=snapshot.project.state)
    # deferred: the store is what is under test
    from fim.store import get_store

    try:
        warm_up(snapshot, [(suite, suite.cases[0], 1)], False, None, services)
        assert get_store(services)._engine is not None
    finally:
        asyncio.run(services.aclose())


def test_latency_of_a_case_that_asked_no_model_says_it_is_fims_own_time() -> None:
    scripted = LLMCall(model="scripted:x", request_model="scripted:x", iteration=1)
    seen = Observed(output="42", events=[scripted], latency_ms=12.0)
    assert OWN_TIME in check_latency(800, seen, ()).message
    real = LLMCall(model="openai/gpt-4o", iteration=1, usage=Usage(prompt_tokens=3))
    asked = Observed(output="42", events=[real], latency_ms=12.0)
    assert OWN_TIME not in check_latency(800, asked, ()).message
