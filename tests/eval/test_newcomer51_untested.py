"""A case that passed in the baseline and is not tested now is said, and can fail the gate
(newcomer51 #5).

Deleting a failing case's cassette turned it into a skip, and the comparison with main
said "No changes": the case is now listed as **No longer tested**, with why, and
`--fail-on-untested` exits 1 on it (unlike `--fail-on-skip`, not on new cases).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fim.cli import app
from fim.eval.baseline import compare, text
from fim.eval.ci import merge
from fim.eval.ci_markdown import markdown

SKIP = "needs a live model (openai/x), no cassette recorded"


def case(name: str, passed: bool = True, skipped: str | None = None) -> dict[str, Any]:
    return {
        "case": name,
        "passed": passed and skipped is None,
        "skipped": skipped,
        "latency_ms": 10.0,
    }


def report(*cases: dict[str, Any]) -> dict[str, Any]:
    suite = {"name": "support", "threshold": 1.0, "cases": list(cases)}
    return merge([{"mode": "replay", "suites": [suite]}])


BASE = report(case("order status"), case("no refusal"), case("flaky", passed=False))


def test_a_case_skipped_now_that_passed_before_is_no_longer_tested():
    now = report(case("order status", skipped=SKIP), case("no refusal"), case("flaky"))
    comparison = compare(now, BASE)
    assert comparison.untested == {"support/order status": "skipped: no cassette"}
    assert comparison.ok  # not a regression: said, and failed only on request
    assert "  no longer tested: support/order status (skipped: no cassette)" in text(comparison)
    summary = markdown(now, comparison)
    assert "No changes." not in summary
    assert "- **No longer tested** (1, passed in the baseline; `--fail-on-untested`" in summary
    assert "`support/order status` (skipped: no cassette)" in summary
    assert summary.startswith("## fim eval: ⚠️ passed, 1 case skipped (no cassette)")


def test_a_case_gone_now_that_passed_before_is_no_longer_tested_not_removed():
    now = report(case("no apology", skipped=SKIP), case("no refusal"), case("flaky"))
    comparison = compare(now, report(case("order status"), case("no refusal"), case("flaky")))
    assert comparison.untested == {"support/order status": "not in this run"}
    assert comparison.removed == [] and comparison.added == ["support/no apology"]


def test_a_case_that_failed_or_was_skipped_before_is_not_untested_now():
    base = report(case("order status", passed=False), case("other", skipped=SKIP))
    comparison = compare(report(case("order status", skipped=SKIP)), base)
    assert comparison.untested == {} and comparison.removed == ["support/other"]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_fail_on_untested_fails_the_gate_and_fail_on_skip_is_another_flag(tmp_path: Path):
    base, now = tmp_path / "base.json", tmp_path / "now.json"
    base.write_text(json.dumps(BASE))
    now.write_text(json.dumps(report(case("order status", skipped=SKIP), case("no refusal"))))
    code, output = run("eval", "merge", str(now), "--baseline", str(base))
    assert code == 0 and "no longer tested: support/order status" in output
    code, output = run("eval", "merge", str(now), "--baseline", str(base), "--fail-on-untested")
    assert code == 1
    assert "error: --fail-on-untested: 1 case passed in the baseline and no longer tested: " in (
        output
    )
    # a new case without a cassette fails --fail-on-skip, not --fail-on-untested
    new = tmp_path / "new.json"
    cases = [case("order status"), case("no refusal"), case("flaky"), case("new", skipped=SKIP)]
    new.write_text(json.dumps(report(*cases)))
    assert run("eval", "merge", str(new), "--baseline", str(base), "--fail-on-untested")[0] == 0
    assert run("eval", "merge", str(new), "--fail-on-skip")[0] == 1


def test_fail_on_untested_needs_a_baseline(tmp_path: Path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(BASE))
    code, output = run("eval", "merge", str(path), "--fail-on-untested")
    assert code == 2 and "there is no --baseline" in output
