"""`python: module:function` in an eval's `expect` (promptfoo's `python:`): a function of
the project's hooks folder, loaded as python tools are, called with the output and the
case's context off the event loop; it returns a bool, a score (passing at `threshold`) or
`(bool, reason)`. `fim validate` imports it and checks that it exists and takes
`(output, context)`; a CSV cell writes it `python: module:function`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.schema.evals import PythonSpec
from fim.eval import python_assertion
from fim.eval.python_assertion import check_python, verdict
from tests.eval_projects import eval_project, problems

CHECKS = '''\
import asyncio


def polite(output, context):
    """(bool, reason): the reason is shown in the report."""
    return "sorry" not in output.lower(), f"topic {context['vars']['topic']}"


def short(output, context):
    """A score: passes at the assertion's threshold."""
    return 1.0 if len(output) < 20 else 0.25


def used_the_calculator(output, context):
    return [c["name"] for c in context["tool_calls"]] == ["calculator"]


def saw_the_prompt(output, context):
    return context["prompt"] == "What is 17*23?" and context["case"] == "times"


def broken(output, context):
    raise ValueError("no answer")


async def slow(output, context):
    await asyncio.Event().wait()


def one_argument(output):
    return True
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = eval_project(tmp_path / "p")  # the demo agent: the calculator, then 391
    (root / "hooks").mkdir()
    (root / "hooks" / "checks.py").write_text(CHECKS)
    return root


def run_eval(root: Path, tmp_path: Path) -> tuple[int, dict[str, list[tuple[bool, str]]]]:
    report = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["eval", "--project", str(root), "--json", str(report)])
    cases = json.loads(report.read_text())["suites"][0]["cases"]
    return result.exit_code, {
        c["case"]: [(o["passed"], o["message"]) for o in c["assertions"] if o["kind"] == "python"]
        for c in cases
    }


def test_python_cells_of_a_csv_and_yaml_items_run_the_project_function(
    project: Path, tmp_path: Path
) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\n"
        "cases:\n"
        "  - cases.csv\n"
        "  - name: times\n"
        "    input: What is 17*23?\n"
        "    expect:\n"
        "      - python: checks:used_the_calculator\n"
        "      - python: checks:saw_the_prompt\n"
        "      - python: {function: checks:short, threshold: 0.2}\n"
    )
    (project / "evals" / "cases.csv").write_text(
        "name,input,topic,__expected1,__expected2\n"
        "polite,What is 17*23?,math,python: checks:polite,python: checks:short\n"
    )
    case = compile_project(project).evals["math"].cases[0]
    assert case.expect[0].python == PythonSpec(function="checks:polite")
    code, outcomes = run_eval(project, tmp_path)
    assert outcomes == {
        "polite": [
            (True, "checks:polite: topic math"),
            (True, "checks:short: score 1 >= threshold 0.5"),
        ],
        "times": [
            (True, "checks:used_the_calculator: passed"),
            (True, "checks:saw_the_prompt: passed"),
            (True, "checks:short: score 1 >= threshold 0.2"),
        ],
    }
    assert code == 0


def test_a_failing_raising_or_hanging_function_fails_its_case_only(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(python_assertion, "PYTHON_SECONDS", 0.05)
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\n"
        "cases:\n"
        "  - {name: strict, input: hi, expect: [{python: {function: checks:short, "
        "threshold: 2}}]}\n"
        "  - {name: raises, input: hi, expect: [{python: checks:broken}]}\n"
        "  - {name: hangs, input: hi, expect: [{python: checks:slow}]}\n"
    )
    code, outcomes = run_eval(project, tmp_path)
    assert outcomes == {
        "strict": [(False, "checks:short: score 1 < threshold 2")],
        "raises": [
            (False, "checks:broken raised ValueError: no answer at hooks/checks.py:23 in broken")
        ],
        "hangs": [(False, "checks:slow did not return within 0.05s")],
    }
    assert code == 1


def test_fim_validate_checks_the_module_the_function_and_its_signature(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\n"
        "default_expect:\n"
        "  - python: checks:one_argument\n"
        "cases:\n"
        "  - cases.csv\n"
        "  - {name: a, input: hi, expect: [{python: nomodule:f}]}\n"
        "  - {name: b, input: hi, expect: [{python: not a ref}]}\n"
    )
    (project / "evals" / "cases.csv").write_text("input,__expected\nhi,python: checks:polit\n")
    assert problems(project) == [
        "evals/math.yaml:7:44: cases.2.expect.0.python.function: 'not a ref' is not "
        "module:function (`checks:polite` is the function polite in hooks/checks.py)",
    ]
    text = (project / "evals" / "math.yaml").read_text()
    (project / "evals" / "math.yaml").write_text(text.replace("not a ref", "checks:polite"))
    assert problems(project) == [
        "evals/cases.csv:2:4: python: cannot import 'checks:polit': hooks/checks.py has no "
        "function 'polit' (did you mean 'polite'?)",
        "evals/math.yaml:3:13: python: 'checks:one_argument' cannot be called as "
        "one_argument(output, context) (define it as `def one_argument(output: str, "
        "context: dict) -> bool | float | tuple[bool, str]`)",
        "evals/math.yaml:6:44: python: cannot import 'nomodule:f': module 'nomodule' not "
        "found: there is no hooks/nomodule.py (modules in hooks/: checks)",
    ]


def test_what_a_function_returns_decides() -> None:
    assert verdict("m:f", True, 0.5).passed
    assert not verdict("m:f", (False, "rude"), 0.5).passed
    assert verdict("m:f", (False, "rude"), 0.5).message == "m:f: rude"
    assert verdict("m:f", 0.5, 0.5).passed and not verdict("m:f", 0.49, 0.5).passed
    assert verdict("m:f", (0.9, "close"), 0.5).message == "m:f: score 0.9 >= threshold 0.5; close"
    wrong = verdict("m:f", "yes", 0.5)
    assert not wrong.passed and "return a bool, a score, or (bool, reason)" in wrong.message


async def test_a_function_that_is_gone_at_run_time_fails_the_assertion(project: Path) -> None:
    snapshot = compile_project(project)
    outcome = await check_python(snapshot, PythonSpec(function="checks:gone"), "out", {})
    assert not outcome.passed and "has no function 'gone'" in outcome.message
