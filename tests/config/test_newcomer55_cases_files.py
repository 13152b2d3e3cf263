"""Newcomer 55, findings 11 and 12: a suite's case files are named as promptfoo names its
test files. `file://tests/*.yaml` is a glob (relative to evals/, its matches in order, each
a file of its own for positions), a YAML file may hold a list of cases beside CSV and
JSONL, and a name that is not found is answered with the case files of subfolders too.
A CSV row with too few cells is told to add trailing commas, not to quote a comma."""

from __future__ import annotations

from pathlib import Path

import pytest

from fim.build.compile import compile_project
from tests.eval_projects import eval_project, problems


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = eval_project(tmp_path / "p")
    tests = root / "evals" / "tests"
    tests.mkdir()
    (tests / "b_refunds.yaml").write_text(
        "- name: refund\n  input: Refund A1002\n  expect: [{icontains: refund}]\n"
        "- input: Cancel A1001\n"
    )
    (tests / "a_greet.csv").write_text("name,input,__expected\ngreet,hi,icontains: hello\n")
    (tests / "notes.txt").write_text("not cases\n")
    return root


def suite(root: Path, cases: str) -> None:
    (root / "evals" / "support.yaml").write_text(f"agent: demo\ncases:\n{cases}")


def test_a_glob_reads_every_matching_file_in_order(project: Path) -> None:
    suite(project, "  - {name: inline, input: hi}\n  - file://tests/*\n")
    assert problems(project) == [
        "evals/support.yaml:4:5: case file 'file://tests/*' is not .csv, .jsonl or .yaml (a "
        "CSV with an 'input' column and __expected columns, one case object per line "
        "(.jsonl), or a YAML list of cases)",
    ]
    suite(project, "  - {name: inline, input: hi}\n  - file://tests/*.yaml\n  - tests/*.csv\n")
    cases = compile_project(project).evals["support"].cases
    # several files: a case the file does not name is named after the file, as rows are
    assert [c.name for c in cases] == ["inline", "refund", "tests/b_refunds.yaml case 2", "greet"]
    assert [a.kind for a in cases[1].expect] == ["icontains"]


def test_a_problem_in_a_globbed_file_is_placed_in_that_file(project: Path) -> None:
    (project / "evals" / "tests" / "c_bad.yml").write_text(
        "- name: ok\n  input: hi\n- description: bad\n  input: hi\n  assert: []\n"
    )
    suite(project, "  - file://tests/*.yml\n")
    assert problems(project) == [
        "evals/tests/c_bad.yml:3:3: unknown key 'description' (fim calls it `name:`)",
        "evals/tests/c_bad.yml:5:3: unknown key 'assert' (fim calls it `expect:`)",
    ]


def test_a_glob_that_matches_nothing_lists_the_case_files_of_subfolders(project: Path) -> None:
    suite(project, "  - file://cases/*.csv\n  - file://../*.csv\n")
    assert problems(project) == [
        "evals/support.yaml:3:5: no case file matches 'cases/*.csv' (case files in evals/: "
        "tests/a_greet.csv, tests/b_refunds.yaml)",
        "evals/support.yaml:4:5: case file glob '../*.csv' is outside evals/ (keep case files "
        "in evals/, named relative to the suite)",
    ]


def test_a_missing_name_is_answered_with_the_file_in_a_subfolder(project: Path) -> None:
    suite(project, "  - a_greet.csv\n")
    assert problems(project) == [
        "evals/support.yaml:3:5: case file 'a_greet.csv' not found "
        "(did you mean 'tests/a_greet.csv'?)"
    ]


def test_a_yaml_case_file_holds_a_list_and_is_no_suite_of_its_own(project: Path) -> None:
    (project / "evals" / "tests" / "wrapped.yaml").write_text("cases:\n  - input: hi\n")
    (project / "evals" / "listed.yaml").write_text("- input: hi\n")
    suite(project, "  - tests/wrapped.yaml\n  - listed.yaml\n")
    found = problems(project)
    assert (
        "evals/support.yaml:4:5: case file 'listed.yaml' is also read as a suite: every "
        "evals/*.yaml is one (move it into a subfolder (evals/tests/listed.yaml), or name it "
        "listed.cases.yaml)" in found
    )
    assert (
        "evals/tests/wrapped.yaml:1:1: expected a list of cases (a YAML case file is the "
        "list itself: `- name: ...` at the top level)" in found
    )
    (project / "evals" / "listed.yaml").rename(project / "evals" / "listed.cases.yaml")
    suite(project, "  - listed.cases.yaml\n")
    assert [c.input for c in compile_project(project).evals["support"].cases] == ["hi"]


def test_a_row_with_too_few_cells_is_told_to_add_commas_one_with_too_many_to_quote(
    project: Path,
) -> None:
    (project / "evals" / "rows.csv").write_text(
        "name,input,order,__expected\nshort,Where is {{ order }}?\nlong,Hi, there,x,\n"
    )
    suite(project, "  - rows.csv\n")
    assert problems(project) == [
        "evals/rows.csv:2:1: row has 2 cells, the header 4 "
        "(add a trailing comma for each empty cell)",
        "evals/rows.csv:3:1: row has 5 cells, the header 4 "
        '(quote a cell that holds a comma: "a, b")',
    ]
