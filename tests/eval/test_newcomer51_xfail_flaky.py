"""A known-failing case and a flaky one, without lowering a suite's threshold
(newcomer51 #8).

- A case may say `xfail: "reason"`: it still runs; a failure is XFAIL (JUnit
  `<skipped type="xfail" message="xfail: reason">`, the Markdown and the text summary say
  xfail) and fails no gate; a pass is XPASS, said so the mark can go, and fails no gate
  either (pytest's default, `strict=False`). Neither counts in the pass rate.
- `fim eval merge FIRST.json RERUN.json`, the second written by `--rerun-failed`: the
  later attempt wins, and a case that failed and then passed is flaky (Surefire's
  `<flakyFailure>`, the Markdown's "Flaky"). Merging them said "is in two reports".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.config.export import json_schema
from fim.errors import RunError
from fim.eval.ci import junit, merge
from fim.eval.shard_check import check_shards


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "evals").mkdir()
    (root / "fim.yaml").write_text("name: ci\nstate: sqlite:///.fim/state.db\n")
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    (root / "evals" / "smoke.yaml").write_text(
        "agent: echo\ncases:\n"
        "  - {name: ok, input: hi, expect: [contains: pong]}\n"
        "  - name: known bug\n    input: hi\n    xfail: 'issue #12: says pong'\n"
        "    expect: [contains: ping]\n"
        "  - name: fixed\n    input: hi\n    xfail: was flaky\n    expect: [contains: pong]\n"
    )
    return root


def test_xfail_is_a_documented_case_field_of_the_exported_schema():
    assert "known to fail" in json.dumps(json_schema("eval"))
    code, output = run("schema", "eval")
    assert code == 0 and "xfail" in output


def test_an_xfail_case_that_fails_passes_the_gate_and_is_said_everywhere(tmp_path: Path):
    root = project(tmp_path / "p")
    out, xml, md = tmp_path / "r.json", tmp_path / "j.xml", tmp_path / "s.md"
    code, output = run(
        "eval", "-p", str(root), "--json", str(out), "--junit", str(xml), "--markdown", str(md)
    )
    assert code == 0, output
    assert "XFAIL smoke / known bug" in output and "xfail: issue #12: says pong" in output
    assert "XPASS smoke / fixed" in output and "remove `xfail:`" in output
    assert "1 xfail" in output and "1 xpass" in output
    data = json.loads(out.read_text())
    suite = data["suites"][0]
    assert [c["status"] for c in suite["cases"]] == ["pass", "xfail", "xpass"]
    assert suite["pass_rate"] == 1.0  # of the one case not marked
    case = ET.parse(xml).getroot().find(".//testcase[@name='known bug']")
    assert case is not None
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("message") == "xfail: issue #12: says pong"
    assert case.find("failure") is None
    assert "### Expected failures (xfail)" in md.read_text()
    assert "XPASS: passed, remove `xfail:`" in md.read_text()
    # merged again, the verdict holds: the report says which cases are xfail
    assert merge([data])["ok"] is True


def cases(*statuses: tuple[str, bool]) -> dict[str, Any]:
    failed = [{"kind": "contains", "passed": False, "message": "expected 'x'"}]
    return {
        "mode": "live",
        "suites": [
            {
                "name": "support",
                "threshold": 1.0,
                "cases": [
                    {
                        "case": name,
                        "passed": ok,
                        "status": "pass" if ok else "fail",
                        "latency_ms": 1.0,
                        "assertions": [] if ok else failed,
                    }
                    for name, ok in statuses
                ],
            }
        ],
    }


def test_a_rerun_report_merges_as_the_later_attempt_and_marks_the_case_flaky(tmp_path: Path):
    first, rerun = tmp_path / "pr.json", tmp_path / "rerun.json"
    first.write_text(json.dumps(cases(("order status", False), ("refund", False), ("hi", True))))
    later = cases(("order status", True), ("refund", False))
    rerun.write_text(json.dumps({**later, "rerun": str(first)}))
    xml, md = tmp_path / "j.xml", tmp_path / "s.md"
    code, output = run("eval", "merge", str(first), str(rerun), "--junit", str(xml))
    assert code == 1, output  # refund failed again
    root = ET.parse(xml).getroot()
    flaky = root.find(".//testcase[@name='order status']")
    assert flaky is not None and flaky.find("failure") is None
    element = flaky.find("flakyFailure")
    assert element is not None and element.get("message") == "contains: expected 'x'"
    again = root.find(".//testcase[@name='refund']")
    assert again is not None and again.find("failure") is not None
    assert again.find("rerunFailure") is not None
    assert root.get("tests") == "3"  # each case once

    rerun.write_text(json.dumps({**cases(("order status", True), ("refund", True)), "rerun": "x"}))
    code, output = run("eval", "merge", str(first), str(rerun), "--markdown", str(md))
    assert code == 0, output
    summary = md.read_text()
    assert summary.startswith("## fim eval: ✅ passed") and "### Flaky" in summary
    assert "`support/order status`: flaky, passed on rerun (first: contains:" in summary


def test_two_first_runs_with_one_case_are_still_refused():
    report = cases(("hi", True))
    with pytest.raises(RunError, match="is in two reports") as refused:
        merge([report, report])
    assert "a --rerun-failed report merges as the later attempt" in str(refused.value.hint)


def test_a_flaky_case_junit_has_one_testcase():
    merged = merge([cases(("a", False)), {**cases(("a", True)), "rerun": "first.json"}])
    assert merged["ok"] and merged["suites"][0]["cases"][0]["flaky"] is True
    assert junit(merged).count("<testcase ") == 1


def test_fim_eval_rerun_failed_writes_a_report_merge_takes_as_the_later_attempt(tmp_path: Path):
    root = project(tmp_path / "p")
    (root / "pong.yaml").write_text('- text: "ping"\n')  # `ok` fails on the first run
    first, rerun, xml = tmp_path / "pr.json", tmp_path / "rerun.json", tmp_path / "j.xml"
    assert run("eval", "-p", str(root), "--json", str(first))[0] == 1
    (root / "pong.yaml").write_text('- text: "pong"\n')  # and passes when run again
    code, output = run("eval", "-p", str(root), "--rerun-failed", str(first), "--json", str(rerun))
    assert code == 0, output
    assert json.loads(rerun.read_text())["rerun"] == str(first)
    code, output = run("eval", "merge", str(first), str(rerun), "--junit", str(xml))
    assert code == 0, output
    case = ET.parse(xml).getroot().find(".//testcase[@name='ok']")
    assert case is not None and case.find("flakyFailure") is not None


def test_a_rerun_that_skipped_the_case_leaves_its_first_failure() -> None:
    """A rerun job without the first run's model key or cassette skips the case: the merge
    kept the skip, outside the pass rate, and the failure was gone (attack-58 F3)."""
    rerun = {**cases(("a", True)), "rerun": "first.json"}
    rerun["suites"][0]["cases"][0]["skipped"] = "no cassette"
    merged = merge([cases(("a", False), ("b", True)), rerun])
    assert not merged["ok"]
    [kept] = [c for c in merged["suites"][0]["cases"] if c["case"] == "a"]
    assert kept["passed"] is False and kept.get("skipped") is None


def test_a_rerun_report_of_a_shard_stands_for_no_shard() -> None:
    """A rerun job keeping the matrix's `--shard 2/2` hid the missing first report of shard
    2, and with both present the merge refused 'given twice' (attack-58 F4)."""
    first = {**cases(("a", True)), "shard": {"index": 1, "total": 2}}
    rerun = {**cases(("a", True)), "rerun": "s2.json", "shard": {"index": 2, "total": 2}}
    with pytest.raises(RunError, match="shard 2/2 missing"):
        check_shards([first, rerun], [Path("s1.json"), Path("s2-rerun.json")])
