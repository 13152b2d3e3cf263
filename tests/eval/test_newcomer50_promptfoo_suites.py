"""A promptfoo config moved into `evals/` gets every problem in one round, each with the
fix (newcomer-50 #8).

promptfoo's `defaultTest:` followed its own did-you-mean into a shape error, its tests
(which have no `description`) each needed a `name`, and the missing `agent:` came only
after all that was fixed, listing no agents. A path a shell completed (`fim eval
evals/x.yaml`, `fim run agents/x.yaml`) was an unknown name, and promptfoo's editor
modeline stayed in the file unremarked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.config.schema import EvalSuite
from tests.eval_projects import eval_project, problems
from tests.inprocess_cli import run_fim

DEFAULT_TEST = "write `default_expect: [...]` (the list under defaultTest.assert)"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return eval_project(tmp_path / "p")


def test_default_test_is_answered_with_its_assert_list_one_level_up(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\n"
        "defaultTest:\n"
        "  assert: [{type: icontains, value: '391'}]\n"
        "cases: [{name: a, input: hi}]\n"
    )
    assert problems(project) == [f"evals/math.yaml:2:1: unknown key 'defaultTest' ({DEFAULT_TEST})"]


def test_default_test_vars_are_said_to_be_default_vars(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ndefaultTest: {assert: [], vars: {tone: kind}, options: {}}\n"
        "cases: [{name: a, input: hi}]\n"
    )
    assert problems(project) == [
        f"evals/math.yaml:2:1: unknown key 'defaultTest' ({DEFAULT_TEST}, and "
        "`default_vars: {...}` (the mapping under defaultTest.vars); fim has no "
        "defaultTest.options)"
    ]


def test_default_test_renamed_but_kept_whole_gets_the_same_hint(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ndefault_expect: {assert: [{icontains: '391'}]}\n"
        "cases: [{name: a, input: hi}]\n"
    )
    assert problems(project) == [
        "evals/math.yaml:2:17: default_expect: expected a list, got {'assert': "
        f"[{{'icontains': '391'}}]}} ({DEFAULT_TEST})"
    ]


def test_yaml_cases_without_a_name_are_case_n_as_csv_rows_are_row_n(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n  - input: What is 17*23?\n  - {name: named, input: hi}\n"
        "  - input: And 2+2?\n"
    )
    suite = compile_project(project).evals["math"]
    assert [case.name for case in suite.cases] == ["case 1", "named", "case 3"]


def test_a_default_case_name_taken_by_another_case_is_a_problem(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n  - input: a\n  - {name: case 1, input: b}\n"
    )
    assert problems(project) == [
        "evals/math.yaml:3:3: cases: the 1st case has no name, and 'case 1', its default, "
        "is another case's: give it a name"
    ]


def test_a_missing_target_comes_with_the_field_problems_and_lists_the_targets(
    project: Path,
) -> None:
    (project / "evals" / "ported.yaml").write_text(
        "tests:\n  - vars: {topic: bananas}\ncases:\n  - input: hi\n"
        "    assert: [{type: icontains, value: x}]\n"
    )
    assert sorted(problems(project)) == [
        "evals/ported.yaml:1:1: an eval suite targets exactly one of 'agent' or 'workflow' "
        "(add `agent: NAME` (agents/NAME.yaml) or `workflow: NAME`: what the cases run; "
        "agents: demo)",
        "evals/ported.yaml:1:1: unknown key 'tests' (fim calls it `cases:`, a list of cases "
        "or a file such as `cases: tests.csv`)",
        "evals/ported.yaml:5:5: unknown key 'assert' (fim calls it `expect:`)",
    ]


def test_a_suite_naming_both_targets_is_told_to_keep_one() -> None:
    with pytest.raises(ValueError, match="got both"):
        EvalSuite.model_validate({"agent": "a", "workflow": "w", "cases": []})


def test_a_valid_suite_still_needs_its_target_alone() -> None:
    with pytest.raises(ValueError, match="targets exactly one of 'agent' or 'workflow'"):
        EvalSuite.model_validate({"cases": [{"input": "hi"}]})


# ------------------------------------------------------------------ paths as names


def test_fim_eval_takes_the_path_of_a_suite_file(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases: [{input: What is 17*23?, expect: [{contains: '391'}]}]\n"
    )
    done = run_fim("eval", "evals/math.yaml", "--json", "-", cwd=project)
    assert done.returncode == 0, done.stderr
    assert [suite["name"] for suite in json.loads(done.stdout)["suites"]] == ["math"]


def test_fim_run_takes_the_path_of_an_agent_file_from_any_folder(project: Path) -> None:
    done = run_fim("run", "agents/demo.yaml", "What is 17*23?", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "391" in done.stdout
    done = run_fim("--project", str(project), "run", "./demo.yaml", "hi", cwd=project / "agents")
    assert done.returncode == 0, done.stderr


def test_a_path_that_declares_nothing_is_still_an_unknown_name(project: Path) -> None:
    done = run_fim("run", "agents/nope.yaml", "hi", cwd=project)
    assert done.returncode != 0
    assert "unknown agent 'agents/nope.yaml'" in done.stderr


# ------------------------------------------------------------------ the editor modeline


def test_promptfoos_schema_modeline_left_in_a_suite_is_a_warning(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "# yaml-language-server: $schema=https://promptfoo.dev/config-schema.json\n"
        "agent: demo\ncases: [{input: hi}]\n"
    )
    done = run_fim("validate", cwd=project)
    assert done.returncode == 0, done.stderr
    assert (
        "evals/math.yaml:1:1: warning: this modeline attaches "
        "https://promptfoo.dev/config-schema.json, so an editor checks the suite against that "
        "schema, not fim's (delete the line, or attach fim's: `fim schema --write "
        ".fim/schema` prints the modeline of each kind)"
    ) in done.stderr


def test_fims_own_schema_modeline_is_no_warning(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "# yaml-language-server: $schema=../.fim/schema/eval.schema.json\n"
        "agent: demo\ncases: [{input: hi}]\n"
    )
    done = run_fim("validate", cwd=project)
    assert done.returncode == 0 and "modeline" not in done.stderr
