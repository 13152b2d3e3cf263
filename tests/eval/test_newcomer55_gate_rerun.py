"""`--rerun-failed` and `merge` with repeated cases (newcomer55 #6).

A suite with `repeat: 3` whose attempts went fail, pass, pass: `--rerun-failed` ran all
three again (pass, pass, fail), and `fim eval merge` put every rerun attempt over the
first run's, so attempt #3, which had passed, was listed as failing and the suite failed.

- `--rerun-failed` runs again only the attempts that failed, by number (the runner's
  plan, `fim.eval.attempts`).
- `merge` never replaces an attempt that passed (a rerun report of every attempt, as an
  older fim wrote, cannot turn a pass into a failure); a failed attempt that passes on the
  rerun is flaky, as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.eval.attempts import AttemptsRunner
from fim.eval.ci import merge
from fim.eval.ci_markdown import markdown
from fim.eval.rerun import failed_cases
from tests.eval_projects import pong_project


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def project(root: Path) -> Path:
    pong_project(
        root,
        {
            "strict.yaml": "agent: echo\nrepeat: 3\ncases:\n"
            "  - {name: greeting, input: hi, expect: [contains: pong]}\n"
            "  - {name: other, input: ho, expect: [contains: pong]}\n"
        },
    )
    return root


def attempt(number: int, passed: bool, name: str = "greeting") -> dict[str, Any]:
    failed = [{"kind": "python", "passed": False, "message": f"call {number}: fail"}]
    return {
        "case": name,
        "attempt": number,
        "passed": passed,
        "status": "pass" if passed else "fail",
        "latency_ms": 1.0,
        "assertions": [] if passed else failed,
    }


def report(*cases: dict[str, Any], rerun: str | None = None) -> dict[str, Any]:
    suite = {"name": "strict", "threshold": 1.0, "cases": list(cases)}
    return {"mode": "replay", "rerun": rerun, "suites": [suite]}


FIRST = report(attempt(1, False), attempt(2, True), attempt(3, True))


def test_a_rerun_never_replaces_an_attempt_that_passed():
    # a rerun report of every attempt (pass, pass, fail), as --rerun-failed wrote it before
    rerun = report(attempt(1, True), attempt(2, True), attempt(3, False), rerun="first.json")
    merged = merge([FIRST, rerun])
    assert merged["ok"] is True
    cases = merged["suites"][0]["cases"]
    assert [(c["attempt"], c["passed"], bool(c.get("flaky"))) for c in cases] == [
        (1, True, True),  # failed, then passed: flaky
        (2, True, False),
        (3, True, False),  # passed first: the rerun's failure does not replace it
    ]
    summary = markdown(merged)
    assert "### Failing cases" not in summary and "[#3]" not in summary
    assert "`strict/greeting`: flaky, passed on rerun (first: python: call 1: fail)" in summary


def test_a_failed_attempt_that_fails_again_stays_failed():
    rerun = report(attempt(1, False), rerun="first.json")
    merged = merge([FIRST, rerun])
    assert merged["ok"] is False
    first = merged["suites"][0]["cases"][0]
    assert first["passed"] is False and first["earlier_failures"] == [["python: call 1: fail"]]


def test_rerun_failed_selects_the_attempts_that_failed(tmp_path: Path):
    path = tmp_path / "first.json"
    path.write_text(json.dumps(report(attempt(1, False), attempt(2, True), attempt(3, False))))
    snapshot = compile_project(project(tmp_path / "p"))
    found = failed_cases(path, snapshot.evals)
    assert found.attempts(None) == {("strict", "greeting"): {1, 3}}
    runner = AttemptsRunner(snapshot, only=found.only(None), attempts=found.attempts(None))
    assert [(s.name, c.name, n) for s, c, n in runner.plan()] == [
        ("strict", "greeting", 1),
        ("strict", "greeting", 3),
    ]


def test_fim_eval_rerun_failed_runs_only_the_failed_attempt_and_merges_green(tmp_path: Path):
    root = project(tmp_path / "p")
    first, rerun, md = tmp_path / "first.json", tmp_path / "rerun.json", tmp_path / "m.md"
    first.write_text(json.dumps(FIRST))
    code, output = run("eval", "-p", str(root), "--rerun-failed", str(first), "--json", str(rerun))
    assert code == 0, output
    ran = [
        (c["case"], c["attempt"])
        for s in json.loads(rerun.read_text())["suites"]
        for c in s["cases"]
    ]
    assert ran == [("greeting", 1)]
    code, output = run("eval", "merge", str(first), str(rerun), "--markdown", str(md))
    assert code == 0, output
    assert "strict: 3 cases, 100%" in output and "### Flaky" in md.read_text()
