"""A configuration error (exit 2) still writes the reports asked for (newcomer55 #8).

`fim eval --junit j.xml --markdown s.md` with `icontain:` in a suite said the problem on
stderr, exited 2 and wrote nothing: the JUnit step and the PR comment had nothing to show.
Now each report asked for says why:
- JUnit: one `<error type="config_error">` test case per problem, with its `file` and
  `line` (what CI reporters annotate);
- Markdown: "configuration error" and the problem lines;
- JSON: `errored: true` and `problems[]` (path, line, column, message, hint).
An unknown suite name, which also exits 2, is written the same way (no file to point at).
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app
from tests.eval_projects import pong_project


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    pong_project(
        root,
        {
            "support.yaml": "agent: echo\ncases:\n  - name: shipped\n    input: hi\n    expect:\n"
            "      - icontain: shipped\n"
        },
    )
    return root


def test_a_suite_that_does_not_compile_still_writes_junit_markdown_and_json(
    broken: Path, tmp_path: Path
):
    xml, md, out = tmp_path / "out" / "j.xml", tmp_path / "out" / "s.md", tmp_path / "r.json"
    code, output = run(
        "eval", "-p", str(broken), "--junit", str(xml), "--markdown", str(md), "--json", str(out)
    )
    assert code == 2, output
    assert "evals/support.yaml:6:9: unknown key 'icontain'" in output

    root = ET.parse(xml).getroot()
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("1", "1", "0")
    [case] = root.iter("testcase")
    assert case.get("file") == "evals/support.yaml" and case.get("line") == "6"
    error = case.find("error")
    assert error is not None and error.get("type") == "config_error"
    assert (error.get("message") or "").startswith("unknown key 'icontain'")
    assert "did you mean 'icontains'" in (error.text or "")

    summary = md.read_text()
    assert summary.startswith("## fim eval: ❌ configuration error")
    assert "- `evals/support.yaml:6:9`: unknown key 'icontain'" in summary

    data = json.loads(out.read_text())
    assert data["errored"] is True and data["ok"] is False and data["suites"] == []
    [problem] = data["problems"]
    assert (problem["path"], problem["line"], problem["column"]) == ("evals/support.yaml", 6, 9)
    assert problem["message"] == "unknown key 'icontain'"


def test_the_json_report_on_stdout_says_the_problems_too(broken: Path):
    result = CliRunner().invoke(app, ["eval", "-p", str(broken), "--json", "-"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["errored"] is True and data["problems"][0]["line"] == 6


def test_an_unknown_suite_is_written_as_a_problem_without_a_place(broken: Path, tmp_path: Path):
    (broken / "evals" / "support.yaml").write_text(
        "agent: echo\ncases:\n  - {name: a, input: hi, expect: [contains: pong]}\n"
    )
    xml, md = tmp_path / "j.xml", tmp_path / "s.md"
    code, _ = run("eval", "suport", "-p", str(broken), "--junit", str(xml), "--markdown", str(md))
    assert code == 2
    [error] = ET.parse(xml).getroot().iter("error")
    assert "unknown eval suite(s): suport" in (error.get("message") or "")
    summary = md.read_text()  # Markdown-escaped, as every text of the summary is
    assert "- unknown eval suite\\(s\\): suport \\(suites: support \\(1 case\\)\\)" in summary


def test_nothing_is_written_when_no_report_was_asked_for(broken: Path):
    code, _ = run("eval", "-p", str(broken))
    assert code == 2
    assert sorted(p.name for p in broken.iterdir()) == ["agents", "evals", "fim.yaml", "pong.yaml"]
