"""`fim eval` as a newcomer from promptfoo meets it: a missing key is a configuration
error (ERROR, exit 2), every report shows the same pass rate, `fim validate` catches a
misspelt tool in an assertion, `--model` runs a suite on several models, and the summary
counts in English."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app

REPO = Path(__file__).resolve().parents[2]

REAL_AGENT = """\
description: An agent on a hosted model
model: general
tools: [calculator]
instructions: Use the calculator for arithmetic.
"""

REAL_SUITE = """\
agent: real
cases:
  - name: adds
    input: "What is 2 + 2?"
    expect:
      - contains: "4"
"""

WRONG_SCRIPT = """\
- text: "17 x 23 is about 400"
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The offline demo agent and its suite, plus an agent on a hosted model (no key set)."""
    for var in ("OPENAI_API_KEY", "FIM_MODEL", "FIM_FAST_MODEL"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "p"
    for folder in ("agents", "evals"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\nmodels:\n  general: openai/gpt-4o-mini\n"
    )
    shutil.copy(REPO / "agents" / "demo.yaml", root / "agents" / "demo.yaml")
    for name in ("demo.yaml", "demo.script.yaml"):
        shutil.copy(REPO / "evals" / name, root / "evals" / name)
    (root / "evals" / "wrong.script.yaml").write_text(WRONG_SCRIPT)
    (root / "agents" / "real.yaml").write_text(REAL_AGENT)
    (root / "evals" / "real.yaml").write_text(REAL_SUITE)
    return root


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


# ----------------------------------------------------------- (a) a missing key is ERROR, exit 2


def test_live_without_a_provider_key_is_an_error_of_the_configuration_exit_2(
    project: Path, tmp_path: Path
):
    junit, report = tmp_path / "junit.xml", tmp_path / "report.json"
    code, output = run(
        "eval", "real", "--live", "--project", str(project), "--junit", str(junit),
        "--json", str(report),
    )  # fmt: skip
    assert code == 2, output
    assert "ERROR" in output and "FAIL" not in output
    assert "missing API key for openai/gpt-4o-mini" in output
    assert "1 could not run (configuration: exit 2)" in output
    case = json.loads(report.read_text())["suites"][0]["cases"][0]
    assert case["status"] == "error" and case["config_error"]
    error = ET.parse(junit).getroot().find(".//testcase/error")
    assert error is not None and error.get("type") == "config_error"


def test_an_error_beside_passing_suites_still_exits_2(project: Path):
    code, output = run("eval", "--live", "--project", str(project))
    assert code == 2 and "PASS" in output and "ERROR" in output


def test_a_shard_that_could_not_run_exits_2_and_so_does_its_merge(project: Path, tmp_path: Path):
    shard = tmp_path / "shard.json"
    code, _ = run(
        "eval", "real", "--live", "--shard", "1/1", "--json", str(shard),
        "--project", str(project),
    )  # fmt: skip
    assert code == 2
    code, output = run("eval", "merge", str(shard))
    assert code == 2 and "real: 1 cases, - (threshold 100%) ERROR" in output


# ---------------------------------------------------- (b) one pass rate in every report


def test_an_all_skipped_suite_has_no_pass_rate_in_any_report(project: Path, tmp_path: Path):
    junit, report = tmp_path / "junit.xml", tmp_path / "report.json"
    code, output = run(
        "eval", "real", "--project", str(project), "--junit", str(junit), "--json", str(report)
    )
    assert code == 1 and "SKIP" in output  # nothing was tested (newcomer9 #4)
    assert "│ -    │" in output  # the table's rate column
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["pass_rate"] == "-"
    assert json.loads(report.read_text())["suites"][0]["pass_rate"] is None
    code, merged = run("eval", "merge", str(report), "--format", "markdown")
    assert code == 1 and "| real | 1 | 0 | 1 | - | 100% | SKIP |" in merged


# --------------------------------------------- (c) validate checks the tools cases expect


def test_validate_points_at_a_misspelt_tool_in_an_assertion(project: Path):
    (project / "evals" / "typo.yaml").write_text(
        "agent: demo\n"
        "cases:\n"
        "  - name: t\n"
        "    input: hi\n"
        "    expect:\n"
        "      - tool_called: {name: calculater}\n"
        "      - tool_not_called: shel\n"
        "      - tool_sequence: {tools: [calculator, calculater]}\n"
    )
    code, output = run("validate", "--project", str(project))
    assert code == 1
    lines = output.splitlines()
    assert (
        "evals/typo.yaml:6:29: agent 'demo' has no tool 'calculater': this assertion could "
        "never be met (did you mean 'calculator'?)" in lines
    )
    assert any(
        line.startswith("evals/typo.yaml:7:26: agent 'demo' has no tool 'shel': this "
                        "assertion could never fail")
        for line in lines
    )  # fmt: skip
    assert any(line.startswith("evals/typo.yaml:8:45: ") for line in lines)
    assert "3 problems in 1 file" in output


def test_validate_accepts_the_tools_of_the_example_project():
    code, output = run("validate", "--project", str(REPO))
    assert code == 0, output


def test_validate_names_a_misspelt_agent_of_a_suite(project: Path):
    (project / "evals" / "real.yaml").write_text(REAL_SUITE.replace("agent: real", "agent: reel"))
    code, output = run("validate", "--project", str(project))
    assert (
        code == 1 and "evals/real.yaml:1:8: unknown agent 'reel' (did you mean 'real'?)" in output
    )


# ------------------------------------------------------------ (d) one suite, several models


def test_each_case_runs_once_per_model_and_the_report_groups_them(project: Path, tmp_path: Path):
    report = tmp_path / "report.json"
    right, wrong = "scripted:evals/demo.script.yaml", "scripted:evals/wrong.script.yaml"
    code, output = run(
        "eval", "demo", "--model", right, "--model", wrong, "--json", str(report),
        "--project", str(project),
    )  # fmt: skip
    assert code == 1, output  # one model fails the suite: the exit code covers every model
    assert "model" in output.splitlines()[2]  # a model column in the table
    assert f"demo [{wrong}] / multiplies with the calculator" in output
    assert "2 runs in" in output
    suites = json.loads(report.read_text())["suites"]
    assert [(s["model"], s["passed"]) for s in suites] == [(right, True), (wrong, False)]


def test_model_matrix_reports_merge_without_mixing_the_models(project: Path, tmp_path: Path):
    report = tmp_path / "report.json"
    models = ["scripted:evals/demo.script.yaml", "scripted:evals/wrong.script.yaml"]
    args = [arg for model in models for arg in ("--model", model)]
    run("eval", "demo", *args, "--json", str(report), "--project", str(project))
    code, output = run("eval", "merge", str(report))
    assert code == 1
    assert f"demo [{models[0]}]: 1 cases, 100% (threshold 100%) PASS" in output
    assert f"demo [{models[1]}]: 1 cases, 0% (threshold 100%) FAIL" in output


def test_a_model_without_its_key_is_an_error_for_that_model_only(project: Path):
    code, output = run(
        "eval", "demo", "--live", "--model", "scripted:evals/demo.script.yaml",
        "--model", "openai/gpt-4o", "--project", str(project),
    )  # fmt: skip
    assert code == 2
    assert "PASS" in output and "missing API key for openai/gpt-4o" in output


def test_model_errors_are_listed_at_once_before_anything_runs(project: Path):
    code, output = run("eval", "--model", "nope", "--model", "fast2", "--project", str(project))
    assert code == 2
    assert "error: --model nope: unknown model role 'nope'" in output
    assert "error: --model fast2: unknown model role 'fast2'" in output


def test_model_refuses_a_workflow_suite(project: Path, tmp_path: Path):
    (project / "evals" / "flow.yaml").write_text(
        "workflow: flow\ncases:\n  - name: c\n    input: {}\n    expect: [{contains: x}]\n"
    )
    (project / "workflows").mkdir()
    (project / "workflows" / "flow.yaml").write_text(
        "nodes:\n  ask:\n    type: agent\n    agent: demo\n    input: hi\n"
    )
    code, output = run("eval", "--model", "general", "--project", str(project))
    assert code == 2, output
    assert "--model applies to agent suites; flow runs a workflow" in output
    assert "fim eval demo real --model ..." in output


def test_one_model_per_run_records_its_own_cassettes(project: Path):
    # deferred: the runner is what this test is about; nothing else needs it
    from fim.build.compile import compile_project
    from fim.eval.runner import EvalRunner

    runner = EvalRunner(compile_project(project), model="openai/gpt-4o")
    assert runner.cassette_dir == project / "evals" / ".cassettes" / "@openai-gpt-4o"


# --------------------------------------------------------------------- (e) plural forms


def test_the_summary_says_1_run(project: Path):
    code, output = run("eval", "demo", "--project", str(project))
    assert code == 0 and "1 run in" in output and "1 runs" not in output
