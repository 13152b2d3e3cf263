"""Newcomer 55, finding 12: a `python:` check that raises said only `checks:broken raised
KeyError: 'question'`, with no line, and JUnit reported it as the agent's `<failure
type="assertion">`. It now names the line of the raise in the project's hooks file (the
project's own frame, as a raising Python tool's event does: `fim.project_frames`), and
JUnit reports it as an `<error type="check_error">`: the check broke, not the output."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app
from tests.eval_projects import eval_project

CHECKS = """\
def lookup(context):
    return context["vars"]["question"]


def broken(output, context):
    return bool(lookup(context))


def strict(output, context):
    return False, "never polite enough"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = eval_project(tmp_path / "p")
    (root / "hooks").mkdir()
    (root / "hooks" / "checks.py").write_text(CHECKS)
    (root / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n"
        "  - {name: raises, input: What is 17*23?, expect: [{python: checks:broken}]}\n"
        "  - {name: fails, input: What is 17*23?, expect: [{python: checks:strict}]}\n"
    )
    return root


def test_a_raising_check_names_the_line_of_the_raise_and_is_a_junit_error(
    project: Path, tmp_path: Path
) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    argv = ["eval", "--project", str(project), "--json", str(report), "--junit", str(junit)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    said = "checks:broken raised KeyError: 'question' at hooks/checks.py:2 in lookup"
    assert said in result.output
    cases = {c["case"]: c for c in json.loads(report.read_text())["suites"][0]["cases"]}
    assert cases["raises"]["assertions"] == [
        {"kind": "python", "passed": False, "message": said, "errored": True}
    ]
    assert cases["fails"]["assertions"] == [
        {"kind": "python", "passed": False, "message": "checks:strict: never polite enough"}
    ]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors")) == ("1", "1")
    raised = suite.find("testcase[@name='raises']")
    failed = suite.find("testcase[@name='fails']")
    assert raised is not None and failed is not None
    error = raised.find("error")
    assert error is not None and raised.find("failure") is None
    assert error.get("type") == "check_error" and said in (error.text or "")
    failure = failed.find("failure")
    assert failure is not None and failure.get("type") == "assertion"
