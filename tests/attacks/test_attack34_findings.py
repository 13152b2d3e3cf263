"""Attack round 34 (today's changes attacked), the findings fixed here: what a hostile
PR's `fim validate` in CI, a PostgreSQL `numeric` NaN and a hook's stderr could leak or
skip. Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app

SECRET = "sk-secret-abcdef123456"


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
@pytest.mark.parametrize("strict", [False, True])
def test_validate_masks_a_secret_a_warning_quotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, strict: bool
) -> None:
    """`command: "${CI_TOKEN}"` in a PR's fim.yaml: validate's not-installed warning quoted
    the command with the value in it, into the CI log."""
    monkeypatch.setenv("MYTOKEN", SECRET)
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("model: openai/gpt-4o-mini\n")
    (tmp_path / "fim.yaml").write_text(
        'name: p\nmcp_servers:\n  x: {command: "${MYTOKEN}"}\n  y: {command: "./b/${MYTOKEN}"}\n'
    )
    args = ["validate", "-p", str(tmp_path), "--format", fmt] + (["--strict"] if strict else [])
    result = CliRunner().invoke(app, args)
    said = result.stdout + result.stderr
    assert "command '***' not found" in said or "command '***'" in said.replace("\\", "")
    assert SECRET not in said and "abcdef" not in said


def test_a_branch_target_that_needs_its_condition_is_a_problem(tmp_path: Path) -> None:
    """`needs: [check]` on a node `check` names in `then`/`else` is an edge live whichever
    branch is taken: both sides ran (the attack round's own workflow skipped nothing). A
    node runs when any edge into it is live, so validate says it where it is written."""
    (tmp_path / "workflows").mkdir()
    (tmp_path / "fim.yaml").write_text("name: p\n")
    (tmp_path / "workflows" / "q.yaml").write_text(
        "nodes:\n"
        "  check: {type: condition, if: '{{ 500 > 100 }}', then: big, else: [small]}\n"
        "  big: {type: tool, tool: calculator, needs: [check], args: {expression: 1+1}}\n"
        "  small: {type: tool, tool: calculator, args: {expression: 2+2}, needs: [check]}\n"
        "  after: {type: tool, tool: calculator, needs: [big], args: {expression: 3+3}}\n"
    )
    result = CliRunner().invoke(app, ["validate", "-p", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[:2] == [
        "workflows/q.yaml:3:47: 'big' needs 'check', whose 'then' names it: it would run "
        "whichever branch is taken (drop 'check' from its needs: the then edge already "
        "orders it)",
        "workflows/q.yaml:4:74: 'small' needs 'check', whose 'else' names it: it would run "
        "whichever branch is taken (drop 'check' from its needs: the else edge already "
        "orders it)",
    ]


def test_a_numeric_nan_is_refused_like_a_float_one() -> None:
    """PostgreSQL's `numeric` (money) reads as `Decimal`: `Decimal('NaN')` became the text
    "NaN", and `'NaN' | float > 100` is false, so a refund skipped its approval again."""
    from decimal import Decimal

    from fim.structured import non_finite
    from fim.workflows.adapters import _non_finite_column

    for bad in ("NaN", "sNaN", "Infinity", "-Infinity"):
        assert non_finite(Decimal(bad)) == ""
        rows = [{"id": 1, "amount": Decimal("5.00")}, {"id": 2, "amount": Decimal(bad)}]
        assert non_finite(rows) == "1.amount"
        assert _non_finite_column(rows) == "amount"
    assert non_finite([{"amount": Decimal("500.00")}]) is None
