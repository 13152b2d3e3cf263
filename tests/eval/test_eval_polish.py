"""`fim eval` polish a promptfoo user notices (newcomer review 3, sections 10 and 13): the
YAML and the CSV forms of an assertion agree, `fim validate` finds an empty prompt and a
regex that cannot compile before a model is paid, a failure names what it checked and
what the calls really were, JUnit points at the case's line, and a `-k` that picks
nothing says what there was to pick."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.schema import Assertion, EvalSuite
from fim.eval.assertions import Observed, check
from fim.eval.ci import junit
from fim.eval.report import failure_lines, json_report
from fim.eval.results import CaseRun, EvalReport, SuiteResult
from fim.events import ToolCallEvent
from fim.masking import remember
from tests.eval_projects import eval_project, problems


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The offline demo agent: its scripted model calls calculator {"expression": "17*23"},
    then answers with the product, 391."""
    return eval_project(tmp_path / "p")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def write(root: Path, name: str, text: str) -> None:
    (root / "evals" / name).write_text(text)


async def _no_judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
    raise AssertionError("no judge in these tests")


# ------------------------------------------------------------- 1. tool_called as a name


def test_tool_called_takes_a_plain_tool_name_in_yaml_as_a_csv_cell_does(project: Path) -> None:
    write(
        project,
        "math.yaml",
        "agent: demo\ncases:\n  - name: times\n    input: What is 17 times 23?\n"
        "    expect:\n      - tool_called: calculator\n",
    )
    (assertion,) = compile_project(project).evals["math"].cases[0].expect
    assert assertion.tool_called is not None and assertion.tool_called.name == "calculator"
    assert assertion.tool_called.args == {} and assertion.tool_called.times is None
    code, output = run("eval", "--project", str(project))
    assert code == 0, output


def test_a_misspelt_tool_name_in_the_short_form_is_found_at_its_value(project: Path) -> None:
    write(
        project,
        "math.yaml",
        "agent: demo\ncases:\n  - name: times\n    input: hi\n"
        "    expect:\n      - tool_called: calculater\n",
    )
    (problem,) = problems(project)
    assert problem.startswith("evals/math.yaml:6:22: agent 'demo' has no tool 'calculater'")
    assert "did you mean 'calculator'?" in problem


def test_a_failed_tool_called_with_args_shows_the_arguments_the_calls_had(project: Path) -> None:
    write(
        project,
        "math.yaml",
        "agent: demo\ncases:\n  - name: times\n    input: What is 17 times 23?\n"
        "    expect:\n      - tool_called: {name: calculator, args: {expression: '6*7'}}\n",
    )
    code, output = run("eval", "--project", str(project))
    assert code == 1, output
    assert (
        'tool_called: expected a call to calculator with {"expression": "6*7"}; '
        'calls: calculator {"expression": "17*23"}'
    ) in output


def test_the_arguments_a_failure_shows_are_masked_in_every_report() -> None:
    secret = "polish-secret-4417"
    remember([secret])
    call = ToolCallEvent(call_id="c1", name="lookup", arguments={"key": secret})
    assertion = Assertion.model_validate({"tool_called": {"name": "lookup", "args": {"key": "a"}}})
    outcome = asyncio.run(check(assertion, Observed(output="", events=[call]), _no_judge, ""))
    assert not outcome.passed and secret in outcome.message  # masked on the way out, below
    run_ = CaseRun(suite="s", case="c", attempt=1, passed=False, outcomes=[outcome])
    assert failure_lines(run_) == [
        'tool_called: expected a call to lookup with {"key": "a"}; calls: lookup {"key": "***"}'
    ]
    assert secret not in json.dumps(json_report_of(run_))


def json_report_of(run_: CaseRun) -> dict[str, object]:
    suite = EvalSuite.model_validate({"name": "s", "agent": "a", "cases": []})
    return json_report(EvalReport([SuiteResult(suite, [run_], False)], 0.0, "replay"))


# ------------------------------------------------------------ 2. an empty input cell


def test_an_empty_input_cell_is_a_validate_problem_at_that_cell(project: Path) -> None:
    write(project, "math.yaml", "agent: demo\ncases: cases.csv\n")
    write(project, "cases.csv", "name,input,__expected\nfull,hi,contains: 391\nempty,,391\n")
    assert problems(project) == [
        "evals/cases.csv:3:7: empty 'input' cell: the case would run the agent on an empty "
        "prompt (write the prompt (it may use the other columns as {{ column }}), or delete "
        "the row)"
    ]


def test_a_blank_input_in_a_jsonl_line_is_a_validate_problem_at_it(project: Path) -> None:
    write(project, "math.yaml", "agent: demo\ncases: cases.jsonl\n")
    write(project, "cases.jsonl", '{"input": "hi"}\n{"name": "blank", "input": "  "}\n')
    (problem,) = problems(project)
    assert problem.startswith(
        'evals/cases.jsonl:2:28: empty "input": the case would run the agent on an empty prompt'
    )


# ------------------------------------------------------------- 3. regex that cannot compile


def test_a_regex_that_does_not_compile_is_a_validate_problem_in_yaml_and_in_a_cell(
    project: Path,
) -> None:
    write(
        project,
        "math.yaml",
        "agent: demo\ndefault_expect:\n  - regex: '[0-9'\ncases:\n"
        "  - name: inline\n    input: hi\n    expect:\n      - regex: a)b\n"
        "  - cases.csv\n",
    )
    write(project, "cases.csv", "input,__expected1,__expected2\nhi,contains: 3,regex: (unclosed\n")
    found = problems(project)
    assert [p.split(": regex:")[0] for p in found] == [
        "evals/cases.csv:2:16",
        "evals/math.yaml:3:12",  # default_expect: once, where the suite writes it
        "evals/math.yaml:8:16",
    ]
    assert found[0].startswith(
        "evals/cases.csv:2:16: regex: /(unclosed/ does not compile: missing ), unterminated "
        "subpattern at position 0 (a Python regex: write"
    )
    assert "regex: /a)b/ does not compile: unbalanced parenthesis at position 1" in found[2]


def test_a_regex_only_python_runs_or_only_re2_runs_is_no_problem(project: Path) -> None:
    """The assertion runs RE2 first and Python's `re` for what RE2 cannot: lookaround is
    Python's, `\\pN` (a digit) is RE2's; each compiles in one of them."""
    write(
        project,
        "math.yaml",
        "agent: demo\ncases:\n  - name: times\n    input: What is 17 times 23?\n"
        "    expect:\n      - regex: '(?<== )391'\n      - regex: '\\pN+'\n",
    )
    code, output = run("eval", "--project", str(project))
    assert code == 0, output


# ---------------------------------------------------------------- 4. is-json's own label


def test_an_is_json_cell_fails_under_its_own_label(project: Path) -> None:
    write(project, "math.yaml", "agent: demo\ncases: cases.csv\n")
    write(project, "cases.csv", "input,__expected\nWhat is 17 times 23?,is-json\n")
    code, output = run("eval", "--project", str(project))
    assert code == 1, output
    assert "is_json: output is not JSON: '17 \u00d7 23 = 391'" in output
    assert "json_schema:" not in output


# ------------------------------------------------------------ 5. duplicate case names


def test_a_duplicate_name_in_a_file_with_a_name_column_says_to_rename(project: Path) -> None:
    write(project, "math.yaml", "agent: demo\ncases: cases.csv\n")
    write(project, "cases.csv", "name,input\ndup name,hi\ndup name,ho\n")
    assert problems(project) == [
        "evals/cases.csv:3:1: duplicate case name 'dup name' (also at evals/cases.csv:2:1; "
        "rename one)"
    ]


def test_a_default_row_name_that_clashes_says_how_to_name_the_row(project: Path) -> None:
    write(project, "cases.csv", "input\nhi\n")  # no name column: its row 2 is `row 2`
    write(project, "more.csv", "name,input\n,hi\n")  # an empty name cell: `row 2` too
    write(
        project, "math.yaml", "agent: demo\ncases:\n  - {name: row 2, input: hi}\n  - cases.csv\n"
    )
    assert problems(project) == [
        "evals/cases.csv:2:1: duplicate case name 'row 2' (also at evals/math.yaml:3:12; "
        "give the rows a 'name' column, or rename one)"
    ]
    write(project, "math.yaml", "agent: demo\ncases:\n  - {name: row 2, input: hi}\n  - more.csv\n")
    assert problems(project) == [
        "evals/more.csv:2:1: duplicate case name 'row 2' (also at evals/math.yaml:3:12; "
        "fill in the row's 'name' cell, or rename one)"
    ]


# ---------------------------------------------------------------- 6. JUnit file and line


def test_junit_testcases_carry_the_file_and_line_of_their_case(
    project: Path, tmp_path: Path
) -> None:
    write(
        project,
        "math.yaml",
        "agent: demo\ncases:\n  - name: inline\n    input: What is 17 times 23?\n"
        "    expect:\n      - contains: nope\n  - cases.csv\n",
    )
    write(project, "cases.csv", "name,input\n\nfrom csv,What is 17 times 23?\n")
    xml, report = tmp_path / "j.xml", tmp_path / "r.json"
    code, output = run(
        "eval", "--project", str(project), "--junit", str(xml), "--json", str(report)
    )
    assert code == 1, output
    expected = {"inline": ("evals/math.yaml", "3"), "from csv": ("evals/cases.csv", "3")}
    for written in (xml.read_text(), junit(json.loads(report.read_text()))):  # and merged
        cases = ET.fromstring(written.encode()).iter("testcase")
        assert {c.get("name"): (c.get("file"), c.get("line")) for c in cases} == expected


def test_a_merged_reports_locations_are_checked_not_trusted() -> None:
    case = {"case": "c", "passed": True, "latency_ms": 0}
    report = {
        "duration_s": 0,
        "suites": [
            {
                "name": "s",
                "threshold": 1,
                "cases": [
                    {**case, "case": "a", "file": 'x"/><evil/>\n', "line": "7; rm"},
                    {**case, "case": "b", "file": 'evals/"s"<evil/>.yaml', "line": True},
                    {**case, "case": "c", "file": "evals/s.yaml", "line": 4},
                ],
            }
        ],
    }
    root = ET.fromstring(junit(report).encode())
    found = {c.get("name"): dict(c.attrib) for c in root.iter("testcase")}
    assert "file" not in found["a"] and "line" not in found["a"]  # not one printable line
    assert found["b"].get("file") == 'evals/"s"<evil/>.yaml' and "line" not in found["b"]
    assert (found["c"]["file"], found["c"]["line"]) == ("evals/s.yaml", "4")
    assert not list(root.iter("evil"))


# ------------------------------------------------------- 7. -k picking nothing lists suites


def test_k_that_selects_nothing_lists_the_suites_with_their_case_counts(project: Path) -> None:
    write(project, "math.yaml", "agent: demo\ncases:\n  - {name: a, input: hi}\n")
    write(
        project,
        "tips.yaml",
        "agent: demo\ncases:\n  - {name: b, input: hi}\n  - {name: c, input: ho}\n",
    )
    code, output = run("eval", "--project", str(project), "-k", "zzz")
    assert code == 2
    assert "(suites: math (1 case), tips (2 cases))" in output
    code, output = run("eval", "nosuchsuite", "--project", str(project))
    assert code == 2
    assert "(suites: math (1 case), tips (2 cases))" in output
