"""Repeated cases as one result, a per-case pass rule, and `--repeat N` (newcomer55 #10).

- A case run more than once is said as one result in the terminal table's lines, the
  Markdown ("### Repeated cases") and the JSON (`case_results`): `greeting tone: 3/5`.
- A case may say `min_pass_rate: 0.8` (ADK's `num_runs` with a threshold): its runs count
  once in the suite's pass rate, passed when that share of them passed, and the suite fails
  when it does not, whatever the suite's `threshold` (a 60%-flaky case among stable ones
  passed a lax one). A merged report keeps the rule and says the same.
- `fim eval --repeat N` runs each selected case N times instead of its YAML's `repeat:`
  (it answered that repeat is YAML-only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.eval.ci import merge
from fim.eval.ci_markdown import markdown
from tests.eval_projects import pong_project, problems

FLAKY = '''\
import fcntl
import pathlib


def tone(output, context):
    """Deterministic flake: of every five calls, the 1st and 4th fail (3 of 5 pass)."""
    with open(pathlib.Path(__file__).with_name("calls"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = len(f.read())
        f.write("x")
    return n % 5 not in (0, 3), f"call {n + 1}"
'''


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def project(root: Path, rule: str = "") -> Path:
    flaky = (
        "agent: echo\nthreshold: 0.8\nrepeat: 5\ncases:\n"
        f"  - {{name: greeting tone, input: hi, expect: [python: checks:tone]{rule}}}\n"
        "  - {name: greeting stable, input: ho, expect: [contains: pong]}\n"
    )
    pong_project(root, {"flaky.yaml": flaky})
    (root / "hooks").mkdir()
    (root / "hooks" / "checks.py").write_text(FLAKY)
    return root


def test_a_repeated_case_is_said_as_one_result_everywhere(tmp_path: Path):
    root = project(tmp_path / "p")
    out, md = tmp_path / "r.json", tmp_path / "s.md"
    code, output = run(
        "eval", "-p", str(root), "--concurrency", "1", "--json", str(out), "--markdown", str(md)
    )
    assert code == 0, output  # 8 of 10 runs at a 0.8 threshold: the suite's rule alone
    assert "flaky / greeting tone: 3/5 passed: FAIL" in output
    assert "flaky / greeting stable: 5/5 passed: PASS" in output
    [suite] = json.loads(out.read_text())["suites"]
    assert suite["case_results"][0] == {
        "case": "greeting tone",
        "runs": 5,
        "passed": 3,
        "rate": 0.6,
        "min_pass_rate": None,
        "result": "fail",
    }
    assert "### Repeated cases" in md.read_text()
    assert "- `flaky/greeting tone`: 3/5 passed: FAIL" in md.read_text()


def test_a_case_with_min_pass_rate_fails_its_suite_when_its_runs_fall_short(tmp_path: Path):
    root = project(tmp_path / "p", ", min_pass_rate: 0.8")
    out = tmp_path / "r.json"
    code, output = run("eval", "-p", str(root), "--concurrency", "1", "--json", str(out))
    assert code == 1, output
    assert "flaky / greeting tone: 3/5 passed (needs 80%): FAIL" in output
    [suite] = json.loads(out.read_text())["suites"]
    # the five stable runs, and the flaky case once, by its rule: 5 of 6
    assert suite["pass_rate"] == pytest.approx(5 / 6) and suite["passed"] is False
    assert {c["min_pass_rate"] for c in suite["cases"] if c["case"] == "greeting tone"} == {0.8}
    assert merge([json.loads(out.read_text())])["ok"] is False  # the merge keeps the rule
    code, output = run("eval", "merge", str(out))
    assert code == 1 and "flaky / greeting tone: 3/5 passed (needs 80%): FAIL" in output


def test_a_case_that_meets_its_rule_counts_once_as_passed() -> None:
    runs = [(1, True), (2, True), (3, False), (4, True), (5, True)]
    cases: list[dict[str, Any]] = [
        {"case": "tone", "attempt": n, "passed": ok, "status": "pass" if ok else "fail"}
        | {"min_pass_rate": 0.8, "latency_ms": 1.0}
        for n, ok in runs
    ]
    merged = merge(
        [{"mode": "replay", "suites": [{"name": "s", "threshold": 1.0, "cases": cases}]}]
    )
    [suite] = merged["suites"]
    assert merged["ok"] and suite["pass_rate"] == 1.0  # threshold 1.0, 4 of 5 by its rule
    assert "- `s/tone`: 4/5 passed \\(needs 80%\\): PASS" in markdown(merged)


def test_min_pass_rate_is_a_share(tmp_path: Path):
    root = project(tmp_path / "p", ", min_pass_rate: 4")
    assert any("min_pass_rate" in p and "less than or equal to 1" in p for p in problems(root))


def test_repeat_on_the_command_line_overrides_the_yaml(tmp_path: Path):
    root = project(tmp_path / "p")
    out = tmp_path / "r.json"
    code, output = run(
        "eval", "-p", str(root), "-k", "*stable", "--repeat", "2", "--json", str(out)
    )
    assert code == 0, output
    [suite] = json.loads(out.read_text())["suites"]
    assert [c["attempt"] for c in suite["cases"]] == [1, 2]  # not the YAML's 5
    assert "fim eval has no --repeat" not in output


def test_repeat_and_rerun_failed_exclude_each_other(tmp_path: Path):
    root = project(tmp_path / "p")
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"suites": [{"name": "flaky", "cases": []}]}))
    code, output = run("eval", "-p", str(root), "--repeat", "3", "--rerun-failed", str(report))
    assert code == 2 and "--repeat with --rerun-failed" in output
