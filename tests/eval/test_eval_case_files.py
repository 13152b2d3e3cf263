"""An eval suite takes its cases from CSV and JSONL files next to it (`cases: cases.csv`,
or a list mixing inline cases and file names), as promptfoo's `tests: file://cases.csv`
does; every problem of a file is reported at its row and column, all at once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.export import json_schema
from fim.config.loader import load
from tests.eval_projects import eval_project, problems

REPO = Path(__file__).resolve().parents[2]

CSV = (
    "name,input,x,__expected1,__expected2\n"
    "times,What is {{ x }} times 23?,17,contains: 391,tool_called: calculator\n"
    ',"What is\n17 times 23?",,not-contains: sorry,\n'
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The offline demo agent (scripted model) and a suite reading cases.csv."""
    root = eval_project(tmp_path / "p")
    (root / "evals" / "math.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (root / "evals" / "cases.csv").write_text(CSV)
    return root


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_a_csv_row_is_a_case_its_columns_vars_and_its_expected_cells_assertions(
    project: Path,
) -> None:
    suite = compile_project(project).evals["math"]
    first, second = suite.cases
    assert first.name == "times" and first.vars == {"x": "17"}
    assert first.input == "What is {{ x }} times 23?"
    assert [a.kind for a in first.expect] == ["contains", "tool_called"]
    assert first.expect[1].tool_called is not None
    assert first.expect[1].tool_called.name == "calculator"
    # no name: the row's line, as a spreadsheet numbers it; an empty cell is no assertion
    assert second.name == "row 3" and second.input == "What is\n17 times 23?"
    assert [(a.kind, a.not_contains) for a in second.expect] == [("not_contains", "sorry")]


def test_fim_eval_runs_file_cases_and_selects_them_by_name(project: Path, tmp_path: Path) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    code, output = run(
        "eval", "--project", str(project), "--json", str(report), "--junit", str(junit)
    )
    assert code == 0, output
    cases = json.loads(report.read_text())["suites"][0]["cases"]
    assert {c["case"] for c in cases} == {"times", "row 3"}
    assert 'name="times"' in junit.read_text()
    code, output = run("eval", "--project", str(project), "-k", "math/row 3")
    assert code == 0 and "1 run in" in output


def test_a_list_mixes_inline_cases_and_files_and_jsonl_lines_are_case_objects(
    project: Path,
) -> None:
    (project / "evals" / "more.jsonl").write_text(
        '{"input": "hi", "expect": [{"contains": "391"}]}\n\n{"name": "named", "input": "yo"}\n'
    )
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n  - {name: inline, input: hi}\n  - cases.csv\n  - file://more.jsonl\n"
    )
    names = [c.name for c in compile_project(project).evals["math"].cases]
    # two files: a default name says which file it came from
    assert names == ["inline", "times", "cases.csv row 3", "more.jsonl line 1", "named"]


def test_every_problem_of_a_case_file_is_reported_at_its_row_and_cell(project: Path) -> None:
    (project / "evals" / "cases.csv").write_text(
        "input,__expected1,__expected2,__prefix\n"
        "a,contian: 391,max_iterations: three,x\n"
        'b,javascript: 1,"oops"x,y\n'
        "c,d\n"
    )
    (project / "evals" / "more.jsonl").write_text(
        '{"input": "hi", "expect": [{"contain": "391"}]}\n{"input": "x" "y"}\n[1]\n'
    )
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases: [cases.csv, more.jsonl, {name: inline, input: hi, repeat: no}]\n"
    )
    found = problems(project)
    assert found == [
        "evals/cases.csv:1:31: column '__prefix' is not one fim reads (fim reads input, name "
        "(or __description), __expected and __expected1..N; other columns are vars)",
        "evals/cases.csv:2:3: unknown assertion 'contian' (did you mean 'contains'? An exact "
        "answer that holds a colon is written 'equals: contian: 391')",
        "evals/cases.csv:2:16: __expected2: expected an integer, got 'three'",
        "evals/cases.csv:3:3: 'javascript' assertions are not supported by fim (fim's own "
        "checks are Python: `python: module:function`, a function in hooks/)",
        'evals/cases.csv:3:23: text after a quoted cell\'s closing quote (write "" for a quote '
        "inside a quoted cell)",
        "evals/cases.csv:4:1: row has 2 cells, the header 4 "
        "(add a trailing comma for each empty cell)",
        "evals/math.yaml:2:66: cases.2.repeat: expected an integer, got 'no'",
        "evals/more.jsonl:1:29: unknown key 'contain' (did you mean 'contains'?)",
        "evals/more.jsonl:2:15: invalid JSON: Expecting ',' delimiter (one case object per line)",
        "evals/more.jsonl:3:1: expected a case object "
        '({"name": ..., "input": ..., "expect": [...]})',
    ]


def test_an_agent_suite_needs_an_input_column_and_case_names_stay_unique(project: Path) -> None:
    (project / "evals" / "cases.csv").write_text("name,q,__expected\ntimes,x,391\n")
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n  - cases.csv\n  - {name: times, input: hi}\n"
    )
    assert problems(project) == [
        "evals/cases.csv:1:1: no 'input' column: an agent's case needs its prompt (add an "
        "'input' column; it may use the other columns as {{ column }})",
        # the file has a 'name' column: the hint does not say to add one
        "evals/math.yaml:4:12: duplicate case name 'times' (also at evals/cases.csv:2:1; "
        "rename one)",
    ]


def test_a_promptfoo_cell_without_a_known_type_is_the_exact_answer(project: Path) -> None:
    (project / "evals" / "cases.csv").write_text(
        "input,__expected,__expected2,__expected3\n"
        "a,Answer: 42,llm-rubric: is polite,is-json\n"
        'b,"tool_sequence: calculator, calculator",icontains: X,'
        '"json_path: {path: $.a, equals: 1}"\n'
    )
    first, second = compile_project(project).evals["math"].cases
    assert [a.model_dump(exclude_none=True) for a in first.expect] == [
        {"equals": "Answer: 42"},
        {"judge": "is polite"},
        {"is_json": True},
    ]
    assert second.expect[0].tool_sequence is not None
    assert second.expect[0].tool_sequence.tools == ["calculator", "calculator"]
    assert second.expect[2].json_path is not None and second.expect[2].json_path.path == "$.a"


def test_a_file_named_outside_the_evals_folder_or_missing_is_refused(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.csv"
    outside.write_text("input\nstolen\n")
    os.symlink(outside, project / "evals" / "link.csv")
    (project / "fim.csv").write_text("input\nx\n")
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n  - link.csv\n  - ../fim.csv\n  - "
        f"{outside}\n  - casse.csv\n  - notes.txt\n"
    )
    assert problems(project) == [
        "evals/math.yaml:3:5: case file 'link.csv' is outside evals/ (keep case files in "
        "evals/, named relative to the suite; a symlink must point inside it too)",
        "evals/math.yaml:4:5: case file '../fim.csv' is outside evals/ (keep case files in "
        "evals/, named relative to the suite; a symlink must point inside it too)",
        f"evals/math.yaml:5:5: case file '{outside}' is outside evals/ (keep case files in "
        "evals/, named relative to the suite; a symlink must point inside it too)",
        "evals/math.yaml:6:5: case file 'casse.csv' not found (did you mean 'cases.csv'?)",
        "evals/math.yaml:7:5: case file 'notes.txt' is not .csv, .jsonl or .yaml (a CSV with "
        "an 'input' column and __expected columns, one case object per line (.jsonl), or a "
        "YAML list of cases)",
    ]


def test_a_fifo_named_as_a_case_file_is_a_problem_not_a_hang(project: Path) -> None:
    os.mkfifo(project / "evals" / "pipe.csv")
    (project / "evals" / "math.yaml").write_text("agent: demo\ncases: pipe.csv\n")
    [found] = problems(project)
    assert found.startswith("evals/math.yaml:2:8: cannot read case file 'pipe.csv': not a regular")


def test_editing_only_the_csv_changes_the_next_load_and_the_snapshot(project: Path) -> None:
    before = compile_project(project)
    (project / "evals" / "cases.csv").write_text("input,__expected\nagain,contains: 391\n")
    after = compile_project(project)
    assert [c.name for c in after.evals["math"].cases] == ["row 2"]
    assert after.version != before.version
    assert load(project).entries["eval"]["math"].decl.cases[0].input == "again"


def test_the_exported_schema_takes_a_file_or_a_list_mixing_files_and_cases() -> None:
    cases = json_schema("eval")["properties"]["cases"]
    file_ref, listed = cases["anyOf"]
    assert file_ref["type"] == "string" and file_ref["pattern"] == r"\.(csv|jsonl)$"
    assert {"$ref": "#/$defs/EvalCase"} in listed["items"]["anyOf"]
    assert "CSV or JSONL" in cases["description"]


def test_a_tool_a_csv_cell_names_is_checked_at_that_cell(project: Path) -> None:
    """`fim validate` checks the tools assertions name against the suite's agent; for a
    case read from a CSV row the problem points at its cell, not at `cases: cases.csv`."""
    (project / "evals" / "cases.csv").write_text(
        "input,__expected1\nWhat is 2 + 2?,tool_called: calculater\n"
    )
    (found,) = problems(project)
    assert found.startswith("evals/cases.csv:2:16: ") and "calculater" in found, found
    assert "did you mean 'calculator'?" in found


def test_a_case_file_past_its_budget_is_one_problem_not_gigabytes(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4 MB CSV of a million one-cell rows took 23 s and 2.6 GB to load (a 60 MB one was
    killed for memory): a case file holds at most `MAX_CASES` cases and `MAX_CELLS` cells,
    and is read up to 4 MiB; past that it is one problem and nothing is built."""
    from fim.config import case_csv, case_files, case_rows

    monkeypatch.setattr(case_csv, "MAX_CASES", 3)
    monkeypatch.setattr(case_rows, "MAX_CASES", 3)
    monkeypatch.setattr(case_csv, "MAX_CELLS", 20)
    (project / "evals" / "cases.csv").write_text("input\n" + "".join(f"q{i}\n" for i in range(5)))
    assert problems(project) == [
        "evals/cases.csv:5:1: case file holds more than 3 cases (split it over suites)"
    ]
    (project / "evals" / "cases.csv").write_text("input" + ",x" * 30 + "\n")
    assert problems(project) == [
        "evals/cases.csv:1:45: case file holds more than 20 cells (split it over suites)"
    ]
    (project / "evals" / "math.yaml").write_text("agent: demo\ncases: more.jsonl\n")
    (project / "evals" / "more.jsonl").write_text('{"input": "q"}\n' * 5)
    assert problems(project) == [
        "evals/more.jsonl:4:1: case file holds more than 3 cases (split it over suites)"
    ]
    monkeypatch.setattr(case_files, "MAX_CASE_FILE_BYTES", 10)
    (found,) = problems(project)
    assert found.startswith("evals/math.yaml:2:8: cannot read case file 'more.jsonl': ")
