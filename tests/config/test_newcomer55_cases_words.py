"""Newcomer 55, findings 7 and 12: promptfoo's `defaultTest.vars` has a place in a suite,
`default_vars:`, merged under every case's own vars (CSV rows too), and a misspelt
assertion type in promptfoo's form (`type: equal`) gets a did-you-mean with the rewrite,
as a promptfoo spelling (`type: icontains`) does."""

from __future__ import annotations

from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.config.export import json_schema
from tests.eval_projects import eval_project, problems


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return eval_project(tmp_path / "p")


def test_default_vars_go_under_each_cases_vars_and_a_cases_own_wins(project: Path) -> None:
    (project / "evals" / "cases.csv").write_text(
        "name,input,order\nrow,Where is {{ order }} for {{ region }}?,A1002\n"
    )
    (project / "evals" / "support.yaml").write_text(
        "agent: demo\n"
        "default_vars: {region: EU, order: A1001}\n"
        "cases:\n"
        "  - {name: inline, input: 'Where is {{ order }}?'}\n"
        "  - {name: own, input: '{{ region }}', vars: {region: US}}\n"
        "  - cases.csv\n"
    )
    cases = compile_project(project).evals["support"].cases
    assert [c.vars for c in cases] == [
        {"region": "EU", "order": "A1001"},
        {"region": "US", "order": "A1001"},
        {"region": "EU", "order": "A1002"},
    ]


def test_a_name_neither_the_case_nor_default_vars_define_is_still_an_error(
    project: Path,
) -> None:
    (project / "evals" / "support.yaml").write_text(
        "agent: demo\ndefault_vars: {region: EU}\n"
        "cases:\n  - {name: a, input: 'Where is {{ order }}?'}\n"
    )
    assert problems(project) == [
        "evals/support.yaml:4:22: input: 'order' is undefined (the case's vars: region)"
    ]


def test_default_vars_is_in_the_suites_json_schema() -> None:
    properties = json_schema("eval")["properties"]
    assert properties["default_vars"]["type"] == "object"


def test_default_test_vars_is_answered_with_default_vars(project: Path) -> None:
    (project / "evals" / "support.yaml").write_text(
        "agent: demo\ndefaultTest: {vars: {region: EU}}\ncases: [{name: a, input: hi}]\n"
    )
    [found] = problems(project)
    assert found.startswith("evals/support.yaml:2:1: unknown key 'defaultTest' (")
    assert "`default_vars: {...}` (the mapping under defaultTest.vars)" in found


def test_a_misspelt_type_gets_a_did_you_mean_with_the_rewrite(project: Path) -> None:
    (project / "evals" / "support.yaml").write_text(
        "agent: demo\ncases:\n"
        "  - name: a\n    input: hi\n    expect:\n"
        "      - {type: equal, value: Paris}\n"
        "      - {type: not-icontain, value: sorry}\n"
        "      - {type: qqq, value: x}\n"
    )
    assert problems(project) == [
        "evals/support.yaml:6:9: cases.0.expect.0: `type: equal` is promptfoo's form of an "
        "assertion (did you mean 'equals'? write `equals: Paris`)",
        "evals/support.yaml:7:9: cases.0.expect.1: `type: not-icontain` is promptfoo's form of "
        "an assertion (did you mean 'not-icontains'? write `not: {icontains: sorry}`, as fim "
        "negates any check of the output)",
        "evals/support.yaml:8:9: cases.0.expect.2: `type: qqq` is promptfoo's form of an "
        "assertion (an assertion is `<check>: <value>`, such as `icontains: billing`)",
    ]
