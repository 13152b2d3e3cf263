"""Reports that pass the shape check are reports every reader can use (attack-51 F2).

`fim eval merge`, `--baseline` and `--rerun-failed` read JSON reports from elsewhere (a
pull request's shard, a baseline in a bucket). One that passes the check of
`fim.eval.report_file` is merged, compared and summarised without a traceback: a field
left out reads as the default its readers assume, a value nested thousands deep is one
line and exit 2, and every summary format shows a name's control characters as escapes,
never raw to the terminal of whoever merges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner, Result

from fim.cli import app
from fim.errors import RunError
from fim.eval.rerun import failed_cases

OSC52 = "\x1b]52;c;cHduZWQ=\x07"
"""An OSC 52 sequence: written raw to a terminal, it sets the clipboard."""

HINT = "(fim eval --json writes one; use the file as that run wrote it)"


def report(**case: Any) -> dict[str, Any]:
    """A report of one failed case, its fields as given."""
    suite = {"name": "s", "duration_s": 1.0, "cases": [{"case": "c", **case}]}
    return {"duration_s": 1.0, "suites": [suite]}


def written(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def fim(*args: str | Path) -> Result:
    return CliRunner().invoke(app, ["eval", *(str(a) for a in args)])


def assert_exited(result: Result, code: int) -> None:
    """The command ended with `code` of its own accord, not with an exception."""
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output


def test_a_report_without_its_duration_merges_as_taking_no_time(tmp_path: Path) -> None:
    shard = written(tmp_path, "shard.json", {"suites": [{"name": "s", "cases": [{"case": "c"}]}]})
    merged = tmp_path / "merged.json"
    result = fim("merge", shard, "--json", merged)
    assert_exited(result, 1)  # the case failed: a FAIL, not a crash
    assert result.stdout == "s: 1 cases, 0% (threshold 100%) FAIL\n"
    assert json.loads(merged.read_text())["duration_s"] == 0.0


def test_a_case_without_its_latency_is_a_junit_case_of_no_time(tmp_path: Path) -> None:
    shard = written(tmp_path, "shard.json", report())
    junit = tmp_path / "junit.xml"
    assert_exited(fim("merge", shard, "--junit", junit), 1)
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case is not None and case.get("time") == "0.000"


def test_a_baseline_whose_cases_have_no_tokens_is_compared(tmp_path: Path) -> None:
    now = written(tmp_path, "now.json", report(passed=True, latency_ms=1.0, tokens=10))
    baseline = written(tmp_path, "main.json", report(passed=True, latency_ms=1.0))
    result = fim("merge", now, "--baseline", baseline)
    assert_exited(result, 0)
    assert "baseline: 0 regressed, 0 improved" in result.stdout


@pytest.mark.parametrize(
    ("usage", "said"),
    [
        ([0.5], "event 0: usage should be an object"),
        ({"cost": "a dollar"}, "event 0: usage.cost should be a number"),
        ({"cost": 10**400}, "event 0: usage.cost should be a number"),
    ],
    ids=["usage-a-list", "cost-a-text", "cost-past-any-float"],
)
def test_a_baseline_priced_from_a_usage_it_cannot_read_is_one_line(
    tmp_path: Path, usage: Any, said: str
) -> None:
    """A report from before cases had `cost` is priced from its run_finished usage."""
    now = written(tmp_path, "now.json", report(passed=True))
    event = {"type": "run_finished", "usage": usage}
    baseline = written(tmp_path, "main.json", report(passed=True, trace=[event]))
    result = fim("merge", now, "--baseline", baseline)
    assert_exited(result, 2)
    assert result.stderr == (
        f"error: {baseline}: not a fim eval JSON report (suites[0].cases[0].trace: {said}) {HINT}\n"
    )


def nested(depth: int) -> str:
    """A report whose case's trace holds a value `depth` lists deep."""
    value = "[" * depth + "]" * depth
    return json.dumps(report(trace=[{"type": "notice", "data": "X"}])).replace('"X"', value)


@pytest.mark.parametrize("depth", [300, 100_000], ids=["past-the-cap", "past-the-parser"])
def test_a_report_nested_too_deep_is_one_line_wherever_it_is_read(
    tmp_path: Path, depth: int
) -> None:
    """300 levels parse but are refused by the nesting check; 100,000 end the JSON parser
    itself (RecursionError): both are the file's problem, said the same way."""
    deep = written(tmp_path, "deep.json", nested(depth))
    said = f"error: {deep}: not a fim eval JSON report (nested deeper than 256 levels) {HINT}\n"
    result = fim("merge", deep)
    assert_exited(result, 2)
    assert result.stderr == said
    shard = written(tmp_path, "shard.json", nested(100))  # as deep as fim may write: read
    assert_exited(fim("merge", shard), 1)
    result = fim("merge", shard, "--baseline", deep)
    assert_exited(result, 2)
    assert result.stderr == said
    with pytest.raises(RunError, match="nested deeper than 256 levels"):
        failed_cases(deep, {})  # --rerun-failed


def test_every_summary_shows_control_characters_in_names_as_escapes(tmp_path: Path) -> None:
    """The Markdown summary as the text one (which already did): inert, and readable."""
    hostile = {
        "duration_s": 1.0,
        "suites": [{"name": f"s{OSC52}", "cases": [{"case": f"c{OSC52}", "error": OSC52}]}],
    }
    shard = written(tmp_path, "shard.json", hostile)
    for format_ in ("markdown", "text"):
        result = fim("merge", shard, "--format", format_)
        assert_exited(result, 1)
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, format_
        assert "\\x1b]52;c;cHduZWQ=\\x07" in result.stdout, format_  # shown, as escapes
