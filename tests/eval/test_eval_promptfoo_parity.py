"""What a promptfoo user reaches for in the first hour of `fim eval`: `contains-any`,
`contains-all`, `starts-with` and their any-case forms (in YAML and in CSV cells),
`defaultTest` as a suite's `default_expect`, a `threshold` written in percent, and a
`-k` that matches in any case and says what it could have meant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.schema import Assertion
from fim.eval.assertions import Observed, check
from tests.eval_projects import eval_project, problems

SEEN = Observed(output="\n  The capital of France is Paris.")


async def _no_judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
    raise AssertionError("not a judge case")


async def outcome(spec: dict[str, Any]) -> tuple[bool, str]:
    checked = await check(Assertion.model_validate(spec), SEEN, _no_judge, "prompt")
    return checked.passed, checked.message


# --------------------------------------------------------------------------- assertions

ASSERTIONS: list[tuple[dict[str, Any], bool, str]] = [
    ({"contains_any": ["Lyon", "Paris"]}, True, "'Paris' in"),
    ({"contains_any": ["Lyon", "paris"]}, False, "none of 'Lyon', 'paris' in"),
    ({"contains_all": ["France", "Paris"]}, True, "all of 'France', 'Paris' in"),
    ({"contains_all": ["France", "Lyon", "Nice"]}, False, "'Lyon', 'Nice' missing from"),
    ({"icontains_any": ["LYON", "PARIS"]}, True, "'PARIS' (any case) in"),
    ({"icontains_any": ["LYON", "NICE"]}, False, "none of 'LYON', 'NICE' (any case) in"),
    ({"icontains_all": ["FRANCE", "paris"]}, True, "all of 'FRANCE', 'paris' (any case) in"),
    ({"icontains_all": ["FRANCE", "lyon"]}, False, "'lyon' missing (any case) from"),
    # the reply's leading newline and spaces are ignored, as `equals` ignores them
    ({"starts_with": "The capital"}, True, "start with 'The capital'"),
    ({"starts_with": "Paris"}, False, "start with 'Paris', got 'The capital of France"),
]


@pytest.mark.parametrize(("spec", "passes", "said"), ASSERTIONS, ids=lambda v: json.dumps(v))
async def test_each_list_and_prefix_assertion_passes_and_fails_saying_what_was_missing(
    spec: dict[str, Any], passes: bool, said: str
) -> None:
    passed, message = await outcome(spec)
    assert passed is passes, message
    assert said in message
    assert "The capital of France is Paris." in message


def test_a_list_assertion_needs_a_text_to_look_for() -> None:
    with pytest.raises(ValueError, match="at least 1 item"):
        Assertion.model_validate({"contains_any": []})


# --------------------------------------------------------------------------- CSV cells

CSV = (
    "name,input,__expected1,__expected2,__expected3\n"
    'a,hi,"contains-any: Paris, ""Lyon, Rhône"", Nice",starts-with: The,'
    '"ICONTAINS-ALL: paris, france,"\n'
    'b,hi,"contains-all: 17, 391","icontains-any: [x, y]",contains_any: one\n'
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The offline demo agent (a scripted model: a calculator call, then the answer 391)."""
    return eval_project(tmp_path / "p")


def test_promptfoo_spellings_in_csv_cells_are_these_assertions(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (project / "evals" / "cases.csv").write_text(CSV)
    first, second = compile_project(project).evals["math"].cases
    # comma-separated as promptfoo reads them; a double-quoted text keeps its comma
    assert [a.model_dump(exclude_none=True) for a in first.expect] == [
        {"contains_any": ["Paris", "Lyon, Rhône", "Nice"]},
        {"starts_with": "The"},
        {"icontains_all": ["paris", "france"]},
    ]
    assert [a.model_dump(exclude_none=True) for a in second.expect] == [
        {"contains_all": ["17", "391"]},
        {"icontains_any": ["x", "y"]},
        {"contains_any": ["one"]},
    ]


def test_a_list_cell_with_no_text_is_a_problem_at_its_cell(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (project / "evals" / "cases.csv").write_text(
        "input,__expected1,__expected2\nhi,contains-any:,levenshtein: 3\n"
    )
    assert problems(project) == [
        "evals/cases.csv:2:4: 'contains-any' names no text to look for "
        "(separate them with commas: 'contains-any: Paris, Lyon')",
        # promptfoo types fim still has no counterpart for are named, not taken as answers
        "evals/cases.csv:2:18: 'levenshtein' assertions are not supported by fim "
        "(a `python: module:function` check computes it; a score passes at its threshold)",
    ]


# --------------------------------------------------------------------------- default_expect


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_default_expect_is_checked_on_every_case_and_reported_like_its_own(
    project: Path, tmp_path: Path
) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\n"
        "default_expect:\n"
        "  - not_contains: sorry\n"
        "  - contains_any: ['392', '393']\n"
        "cases:\n"
        "  - {name: inline, input: What is 17 times 23?, expect: [contains: '391']}\n"
        "  - cases.jsonl\n"
        "  - cases.csv\n"
    )
    (project / "evals" / "cases.jsonl").write_text('{"name": "from file", "input": "17*23?"}\n')
    (project / "evals" / "cases.csv").write_text("name,input,__expected\nrow,17*23?,391\n")
    report = tmp_path / "r.json"
    code, output = run("eval", "--project", str(project), "--json", str(report))
    assert code == 1, output
    cases = {c["case"]: c for c in json.loads(report.read_text())["suites"][0]["cases"]}
    # after the case's own assertions, on the inline case and the file's alike
    assert [a["kind"] for a in cases["inline"]["assertions"]] == [
        "contains",
        "not_contains",
        "contains_any",
    ]
    assert [a["kind"] for a in cases["from file"]["assertions"]] == [
        "not_contains",
        "contains_any",
    ]
    assert [a["kind"] for a in cases["row"]["assertions"]] == [
        "equals",
        "not_contains",
        "contains_any",
    ]
    assert not any(case["passed"] for case in cases.values())
    assert "contains_any: none of '392', '393' in '17 \u00d7 23 = 391'" in output


def test_promptfoos_default_test_key_points_to_default_expect(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ndefaultTest: {assert: []}\ncases: [{name: a, input: hi}]\n"
    )
    assert problems(project) == [
        "evals/math.yaml:2:1: unknown key 'defaultTest' "
        "(write `default_expect: [...]` (the list under defaultTest.assert))"
    ]


# --------------------------------------------------------------------------- threshold


def test_a_threshold_in_percent_is_told_it_is_a_fraction(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\nthreshold: 100\ncases: [{name: a, input: hi}]\n"
    )
    assert problems(project) == [
        "evals/math.yaml:2:12: threshold: Input should be less than or equal to 1 "
        "(a fraction: 1.0 is 100%)"
    ]


# --------------------------------------------------------------------------- -k


@pytest.fixture
def tips(project: Path) -> Path:
    (project / "evals" / "tips.yaml").write_text(
        "agent: demo\ncases:\n  - {name: Times, input: What is 17 times 23?}\n"
    )
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n  - {name: sum, input: hi}\n"
    )
    return project


@pytest.mark.parametrize("pattern", ["TIPS", "tips/times", "TIP*/T*", "ImE"])
def test_k_selects_in_any_case_as_pytest_does(tips: Path, pattern: str) -> None:
    code, output = run("eval", "--project", str(tips), "-k", pattern)
    assert code == 0, output
    assert "tips" in output and "math" not in output and "1 run in" in output


def test_k_that_selects_nothing_names_what_it_could_have_meant(tips: Path) -> None:
    code, output = run("eval", "--project", str(tips), "-k", "tips/tmes")
    assert code == 2
    assert (
        "error: no eval cases match -k 'tips/tmes' "
        "(did you mean 'tips/Times' or 'tips'? suites: math (1 case), tips (1 case))"
    ) in output
    code, output = run("eval", "--project", str(tips), "-k", "zzz")
    assert code == 2
    assert "error: no eval cases match -k 'zzz' (suites: math (1 case), tips (1 case))" in output


def test_a_tool_default_expect_names_is_checked_once_where_the_suite_writes_it(
    project: Path,
) -> None:
    """Every case holds a copy of `default_expect`: a misspelt tool there was reported once
    per case, each at the case."""
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\n"
        "default_expect:\n"
        "  - tool_called: {name: calculater}\n"
        "cases:\n"
        "  - {name: a, input: hi}\n"
        "  - {name: b, input: ho}\n"
    )
    (found,) = problems(project)
    assert found.startswith("evals/math.yaml:3:25: agent 'demo' has no tool 'calculater'"), found
