"""A case's `input` is a template over its `vars` (a CSV row's other columns). A name the
input reads that no var defines (`{{ pcnt }}` after the column became `pct`) is a
`fim validate` problem at the input, or at the CSV cell, with a did-you-mean over the case's
vars; a case that still reaches `fim eval` is that case's ERROR (exit 2) with the same
message, never a traceback, and the other cases run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.build.eval_checks import case_input_problems
from fim.build.snapshot import Snapshot
from fim.cli import app
from fim.config.schema import AgentDecl, EvalCase, EvalSuite, Project
from fim.eval.runner import EvalRunner
from tests.eval_projects import eval_project, problems

REPO = Path(__file__).resolve().parents[2]
PCNT = "input: 'pcnt' is undefined (did you mean 'pct'? the case's vars: pct, total)"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The offline demo agent (scripted model, calculator) with room for eval suites."""
    return eval_project(tmp_path / "p")


def test_validate_reports_an_undefined_var_of_a_csv_row_at_its_input_cell(project: Path):
    (project / "evals" / "tips.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (project / "evals" / "cases.csv").write_text(
        "name,input,pct,total,__expected1\n"
        "renamed,What is {{ pcnt }}% of {{ total }}?,15,48,contains: 7.20\n"
        "fine,What is {{ pct }}% of {{ total }}?,15,48,contains: 7.20\n"
    )
    # row 2, the input cell starts after "renamed," (column 9)
    assert problems(project) == [f"evals/cases.csv:2:9: {PCNT}"]


def test_an_undefined_var_comes_with_the_projects_other_problems_in_one_run(project: Path):
    """Checked with the declarations, not after them: a newcomer fixing a typo elsewhere
    does not find the var's problem only on the next `fim validate`."""
    (project / "evals" / "tips.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (project / "evals" / "cases.csv").write_text(
        "name,input,pct,total\nrenamed,What is {{ pcnt }}% of {{ total }}?,15,48\n"
    )
    (project / "agents" / "broken.yaml").write_text("description: b\nmodel: generl\n")
    found = problems(project)
    assert f"evals/cases.csv:2:9: {PCNT}" in found
    assert any(line.startswith("agents/broken.yaml:2:8: ") for line in found), found


def test_validate_reports_every_undefined_name_of_a_yaml_case_at_its_input(project: Path):
    (project / "evals" / "tips.yaml").write_text(
        "agent: demo\n"
        "cases:\n"
        "  - name: tip\n"
        '    input: "Tip on {{ totl }}{% if rounded %} rounded{% endif %}"\n'
        "    vars: {total: 48, pct: 15}\n"
        "  - name: chat\n"
        '    input: [{role: user, content: "{{ pct }} of {{ total }}, {{ range(3) | list }}"}]\n'
        "    vars: {total: 48, pct: 15}\n"
        "  - name: literal braces without vars\n"
        '    input: "Explain {{ name }} in Jinja"\n'
    )
    assert problems(project) == [
        "evals/tips.yaml:4:12: input: 'totl' is undefined "
        "(did you mean 'total'? the case's vars: pct, total)",
        "evals/tips.yaml:4:12: input: 'rounded' is undefined (the case's vars: pct, total)",
    ]


def test_validate_reports_a_syntax_error_and_a_name_inside_chat_messages(project: Path):
    (project / "evals" / "tips.yaml").write_text(
        "agent: demo\n"
        "cases:\n"
        "  - name: unclosed\n"
        '    input: "Tip on {{ total"\n'
        "    vars: {total: 48}\n"
        "  - name: messages\n"
        "    input:\n"
        "      - {role: user, content: 'fine {{ total }}'}\n"
        "      - {role: user, content: 'and {{ totals }}'}\n"
        "    vars: {total: 48}\n"
    )
    found = problems(project)
    assert found[0].startswith("evals/tips.yaml:4:12: input: invalid Jinja2 template:")
    assert found[1] == (
        "evals/tips.yaml:9:31: input: 'totals' is undefined "
        "(did you mean 'total'? the case's vars: total)"
    )


def test_a_workflow_cases_inputs_are_checked_value_by_value():
    case = EvalCase.model_validate(
        {
            "name": "wf",
            "input": {"city": "{{ town }}", "days": "{{ days }}", "note": "plain"},
            "vars": {"city": "Oslo", "days": 3},
        }
    )
    assert case_input_problems(case) == [
        (
            ("input", "city"),
            "input: 'town' is undefined",
            "the case's vars: city, days",
        )
    ]


def snapshot_with(root: Path, *cases: dict[str, object]) -> Snapshot:
    """A project compiled without `fim validate` (as a hand-built snapshot or a stale
    server's would be): the eval itself must cope with a case that cannot render."""
    shutil.copy(REPO / "evals" / "demo.script.yaml", root / "demo.script.yaml")
    demo = AgentDecl(name="demo", model="scripted:demo.script.yaml", tools=["calculator"])
    suite = EvalSuite.model_validate({"name": "tips", "agent": "demo", "cases": list(cases)})
    project = Project(name="p", state=f"sqlite:///{root / 'state.db'}")
    return Snapshot(root=root, project=project, agents={"demo": demo}, evals={"tips": suite})


async def test_a_case_whose_input_cannot_render_is_its_error_and_the_others_run(
    tmp_path: Path,
):
    vars_ = {"pct": "15", "total": "48"}
    snapshot = snapshot_with(
        tmp_path,
        {"name": "renamed", "input": "What is {{ pcnt }}% of {{ total }}?", "vars": vars_},
        {"name": "attribute", "input": "{{ total.cents }} cents", "vars": vars_},
        {
            "name": "fine",
            "input": "What is {{ pct }}% of {{ total }}?",
            "vars": vars_,
            "expect": [{"contains": "391"}],
        },
    )
    report = await EvalRunner(snapshot).run()
    runs = {run.case: run for run in report.suites[0].runs}
    assert runs["renamed"].status == "error" and runs["renamed"].config_error
    assert runs["renamed"].error == PCNT
    # what only rendering finds is said with the case's vars, not the workflows' hint
    attribute = runs["attribute"]
    assert attribute.status == "error" and attribute.error is not None
    assert "has no attribute 'cents'" in attribute.error
    assert attribute.error.endswith("(the case's vars: pct, total)")
    assert "nodes" not in attribute.error
    assert runs["fine"].status == "pass"
    assert report.exit_code == 2


def test_fim_eval_refuses_the_project_at_the_cell_not_with_a_traceback(project: Path):
    (project / "evals" / "tips.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (project / "evals" / "cases.csv").write_text(
        "input,pct,total\nWhat is {{ pcnt }}% of {{ total }}?,15,48\n"
    )
    result = CliRunner().invoke(app, ["eval", "--project", str(project)])
    assert result.exit_code == 2, result.output
    assert f"evals/cases.csv:2:1: {PCNT}" in result.output
    assert "Traceback" not in result.output
