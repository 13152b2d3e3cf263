"""`fim eval`'s flags as a promptfoo user types them (newcomer9, finding 13): a flag fim
has elsewhere says where, `--threshold` without `--baseline` is refused rather than
ignored, `--concurrency 0` is refused, and `fim eval merge --help` shows merge's options."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        (["-o", "r.json"], "fim eval has no -o: fim eval writes --json FILE"),
        (
            ["--filter-failing", "r.json"],
            "fim eval has no --filter-failing: fim calls it --rerun-failed REPORT.json",
        ),
        (
            ["--max-concurrency", "4"],
            "fim eval has no --max-concurrency: fim calls it --concurrency N",
        ),
    ],
)
def test_a_promptfoo_flag_says_where_fim_has_it(tmp_path: Path, flag: list[str], said: str) -> None:
    code, output = run("eval", "--project", str(tmp_path), *flag)
    assert code == 2 and f"error: {said}" in output, output
    assert "Possible options" not in output


def test_threshold_without_baseline_is_refused(tmp_path: Path) -> None:
    for args in (["eval"], ["eval", "merge", "a.json"]):
        code, output = run(*args, "--project", str(tmp_path), "--threshold", "0.5")
        assert code == 2, output
        assert output == (
            "error: --threshold is the change in latency, tokens or cost --baseline reports, "
            "and there is no --baseline (a suite's pass rate is `threshold:` in its YAML)"
        )


def test_concurrency_must_be_at_least_one(tmp_path: Path) -> None:
    code, output = run("eval", "--project", str(tmp_path), "--concurrency", "0")
    assert code == 2 and "Invalid value for '--concurrency'" in output, output


def test_eval_merge_help_shows_merges_options_and_eval_help_its_own() -> None:
    code, merge = run("eval", "merge", "--help")
    assert code == 0
    assert "eval merge REPORTS... [OPTIONS]" in merge and "Merge the JSON reports" in merge
    for option in ("--junit", "--json", "--baseline", "--threshold", "--format", "--fail-on-skip"):
        assert option in merge
    for option in ("--concurrency", "--record", "--live", "--model", "--with-hooks"):
        assert option not in merge
    code, merge_h = run("eval", "merge", "a.json", "-h")
    assert code == 0 and "Merge the JSON reports" in merge_h
    code, own = run("eval", "--help")
    assert code == 0 and "--concurrency" in own and "Merge the JSON reports" not in own
