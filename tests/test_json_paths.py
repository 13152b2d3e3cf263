"""The one JSONPath dialect (`fim.json_paths`): the syntax users and models already write,
errors that say where a path stopped, and `fim validate` reporting a path that no longer
parses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.errors import ConfigError
from fim.eval.assertions import json_path
from fim.json_paths import PathError, check, lookup, query

DOC = {
    "orders": [
        {"id": 1, "customer": {"name": "Ada"}, "total": 40},
        {"id": 2, "customer": {"name": "Bob"}, "total": 10},
    ],
    "meta": {"odd key": 1, "x-y": 2, "$ref": 3},
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("orders[0].id", 1),
        ("$.orders[-1].customer.name", "Bob"),
        ("orders[*].id", [1, 2]),
        ("$.orders[*].customer.name", ["Ada", "Bob"]),
        ("meta['odd key']", 1),
        ('meta["odd key"]', 1),
        ("meta.x-y", 2),
        ("meta['$ref']", 3),
        ("$", DOC),
        ("", DOC),
        ("@", DOC),
        ("$.orders[?@.total > 20].id", [1]),  # filters come with the library
    ],
)
def test_paths_in_use_today_keep_working(path: str, expected: object) -> None:
    assert query(DOC, path) == expected


def test_a_missing_singular_path_says_where_it_stopped() -> None:
    with pytest.raises(PathError, match=r"key 'status' not found at 'orders': found a list"):
        query(DOC, "orders.status")
    with pytest.raises(PathError, match=r"use 'orders\[\*\]\.status'"):
        query(DOC, "orders.status")
    with pytest.raises(PathError, match=r"'orders\[5\]' does not exist: found a list of 2"):
        query(DOC, "orders[5].id")
    assert query(DOC, "orders[*].status") == []  # a projection just matches nothing
    assert lookup(DOC, "orders[0].status", "none") == "none"


def test_unparsable_paths_and_regex_functions_are_refused() -> None:
    with pytest.raises(PathError, match="cannot parse path"):
        query(DOC, "meta.$ref")
    with pytest.raises(PathError, match="cannot parse path"):
        query(DOC, "$.orders[?search(@.customer.name, '(a+)+$')]")
    assert check("$.orders[*].id") is None
    assert "cannot parse path" in (check("orders[") or "")


def test_the_eval_assertion_uses_the_same_dialect() -> None:
    assert json_path({"a": {"b c": [1, {"d": 2}]}}, "$.a['b c'][1].d") == 2
    with pytest.raises(KeyError):
        json_path(DOC, "$.zz")


def test_fim_validate_reports_a_path_that_does_not_parse(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    shutil.copytree(Path(__file__).parent / "fixtures" / "projects" / "minimal", root)
    (root / "evals").mkdir(exist_ok=True)
    (root / "evals" / "p.yaml").write_text(
        "agent: helper\ncases: [{name: x, input: hi, expect: "
        "[{json_path: {path: meta.$ref, equals: 3}}]}]\n"
    )
    with pytest.raises(ConfigError) as info:
        compile_project(root)
    (problem,) = info.value.problems
    assert str(problem).startswith("evals/p.yaml:2:")
    assert "cannot parse path 'meta.$ref'" in str(problem)
    assert "$['odd key']" in str(problem)
