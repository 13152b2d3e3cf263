"""An agent's `instructions` render on the event loop, so they render with the one guarded
environment workflow templates use (`fim.config.template_guards`): a valid but hostile
template (a loop without end, recursion, a value doubled until memory runs out, a prompt
file included a thousand times) fails the run with the limit it hit, never freezes it.

What instructions read is the project's and the agent's name and description, fim.yaml's
allow-listed environment and the time: nothing a caller or a model sends. The guards hold
anyway: a template that is valid is not therefore harmless.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.instructions import InstructionsError, render
from fim.capabilities import CAPABILITIES
from fim.config import template_guards, template_sizes
from fim.config.schema import AgentDecl, Project
from fim.errors import ConfigError, RunError
from fim.run.assembly import assemble
from fim.run.services import RunContext, Services
from fim.workflows import templates as workflow_templates

PROJECT = Project(name="shop", description="A shop")


def rendered(root: Path, instructions: str) -> str:
    agent = AgentDecl(name="a", description="helps", instructions=instructions)
    return render(root, PROJECT, agent, {}, "2026-01-01T00:00:00+00:00")


def refusal(root: Path, instructions: str) -> str:
    with pytest.raises(InstructionsError) as info:
        rendered(root, instructions)
    return info.value.text


def test_a_value_built_past_the_size_limit_fails_the_render(tmp_path: Path) -> None:
    assert "would build" in refusal(tmp_path, "{{ 'x' * 2000000 }}")


@pytest.mark.parametrize(
    "doubling",
    [
        "{% set s = s ~ s %}",
        "{% set s = s + s %}",
        "{% set s = [s, s] %}",
        "{% set s = (s, s) %}",
        "{% set s = {'a': s, 'b': s} %}",
        "{% set s = '%s%s' | format(s, s) %}",
        "{% set s = '{}{}'.format(s, s) %}",
        "{% set s = dict(a=s, b=s) %}",
        "{% set s = ([s] * 2) | join %}",
        "{% set s = [s, s] | join %}",
    ],
)
def test_a_value_doubled_until_memory_runs_out_is_refused_at_the_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doubling: str
) -> None:
    """Each of these doubles what it is given; written forty times it would build 2^40
    copies. Every value a template builds is weighed first (the limit lowered here)."""
    monkeypatch.setattr(template_sizes, "MAX_BUILT", 1000)
    text = "{% set s = 'x' * 300 %}" + doubling * 3 + "{{ s | length }}"
    assert "would build" in refusal(tmp_path, text)


def test_loops_count_their_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested loops multiply: each iteration (and each call) is a step of the render.
    `range` alone is capped by Jinja's sandbox."""
    monkeypatch.setattr(template_guards, "MAX_STEPS", 10_000)
    nested = "{% for i in range(200) %}{% for j in range(100) %}{% endfor %}{% endfor %}"
    assert "more than 10000 steps" in refusal(tmp_path, nested)
    listed = "{% set xs = range(200) | list %}{% for i in xs %}{% for j in xs %}{% endfor %}"
    assert "more than 10000 steps" in refusal(tmp_path, listed + "{% endfor %}")
    assert "Range too big" in refusal(tmp_path, "{% for i in range(10**9) %}{% endfor %}")


def test_recursion_through_macros_is_bounded_in_depth_and_in_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endless = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    assert "more than 100 deep" in refusal(tmp_path, endless)
    monkeypatch.setattr(template_guards, "MAX_STEPS", 10_000)
    branching = (
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(16) }}"
    )
    assert "more than 10000 steps" in refusal(tmp_path, branching)


def test_what_a_render_writes_is_counted_in_macros_and_blocks_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_guards, "MAX_OUTPUT", 1000)
    loud = "{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}"
    assert "wrote more than 1000 characters" in refusal(tmp_path, loud)
    quiet = "{% macro m() %}" + loud + "{% endmacro %}{% set s = m() %}done"
    assert "wrote more than 1000 characters" in refusal(tmp_path, quiet)
    block = "{% set s %}" + loud + "{% endset %}done"
    assert "wrote more than 1000 characters" in refusal(tmp_path, block)


def test_a_prompt_file_included_over_and_over_stops_at_the_output_limit(tmp_path: Path) -> None:
    """Each prompt file is at most MAX_PROMPT_BYTES; including one in a loop is not."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "big.md").write_text("x" * 200_000)
    many = "{% for i in range(100) %}{% include 'prompts/big.md' %}{% endfor %}"
    assert "wrote more than 16000000 characters" in refusal(tmp_path, many)


def test_a_render_stops_at_its_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work a step count does not see (a big sort in every iteration) is bounded by the
    time a render may take; the clock here advances half a second a step."""

    def ticking() -> Iterator[float]:
        now = 0.0
        while True:
            yield now
            now += 0.5

    clock = ticking()
    monkeypatch.setattr(template_guards, "_clock", lambda: next(clock))
    text = "{% for i in range(10) %}{{ i }}{% endfor %}"
    assert "took more than 1s to render" in refusal(tmp_path, text)


def project(root: Path, instructions: str) -> Path:
    (root / "agents").mkdir(parents=True)
    settings = {"name": "shop", "state": "sqlite:///.fim/state.db"}
    (root / "fim.yaml").write_text(json.dumps(settings))
    agent = {"description": "helps", "model": "openai/gpt-4o-mini", "instructions": instructions}
    (root / "agents" / "a.yaml").write_text(json.dumps(agent))
    return root


def test_validate_reports_the_limit_at_the_instructions(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        compile_project(project(tmp_path, "{% if true %}{{ 'x' * 2000000 }}{% endif %}"))
    [problem] = [str(p) for p in info.value.problems]
    assert problem.startswith("agents/a.yaml:1:") and "would build" in problem


def test_a_run_fails_with_a_run_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fim validate` passed (the limit was higher then); the run fails cleanly."""
    snapshot = compile_project(project(tmp_path, "{% if true %}{{ 'x' * 2000 }}{% endif %}"))
    monkeypatch.setattr(template_sizes, "MAX_REPEAT", 1000)
    ctx = RunContext(
        snapshot=snapshot,
        agent=snapshot.agent("a"),
        services=Services(providers=CAPABILITIES, root=snapshot.root),
    )
    with pytest.raises(RunError, match=r"agents/a.yaml: instructions: .*would build"):
        asyncio.run(assemble(ctx))


def test_workflow_templates_share_the_same_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's output is model output: doubling it is refused by the same helper."""
    monkeypatch.setattr(template_sizes, "MAX_BUILT", 1000)
    with pytest.raises(workflow_templates.TemplateError, match="would build"):
        workflow_templates.render("{{ s ~ s }}", {"s": "x" * 600})
    assert workflow_templates.render("{{ s ~ s }}", {"s": "x" * 400}) == "x" * 800
