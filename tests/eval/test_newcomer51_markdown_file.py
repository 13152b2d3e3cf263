"""The Markdown summary as a file, and of a size a PR comment takes (newcomer51 #6, #11).

`--markdown PATH` on `fim eval` and `fim eval merge` writes the summary, so a CI step
needs no `| tee` (whose exit status, in `sh`, is tee's: a regressed merge passed). The
failing cases listed are capped at 50 and the whole summary at 60,000 characters: 300
failures made 97,756 characters, over GitHub's 65,536-character comment limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fim.cli import app
from fim.eval.ci import merge
from fim.eval.ci_markdown import LISTED, MAX_CHARS, markdown


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def failing(count: int, reason: str = "contains: expected 'x'", suite: str = "s") -> dict:
    cases: list[dict[str, Any]] = [
        {
            "case": f"case {i:03}",
            "passed": False,
            "latency_ms": 1.0,
            "assertions": [
                {"kind": "contains", "passed": False, "message": reason},
                {"kind": "judge", "passed": None, "not_checked": "no_cassette", "message": "j"},
            ],
        }
        for i in range(count)
    ]
    return merge(
        [{"mode": "replay", "suites": [{"name": suite, "threshold": 1.0, "cases": cases}]}]
    )


def test_merge_writes_the_summary_to_a_file_and_keeps_its_exit_status(tmp_path: Path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps(failing(2)))
    out = tmp_path / "out" / "summary.md"
    code, output = run("eval", "merge", str(report), "--markdown", str(out))
    assert code == 1  # the verdict, not a pipe's
    assert out.read_text().startswith("## fim eval: ❌ failed")
    assert "s: 2 cases, 0%" in output  # stdout keeps the text summary
    assert out.read_text() == markdown(failing(2))


def test_eval_writes_the_summary_to_a_file(tmp_path: Path):
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "evals").mkdir()
    (root / "fim.yaml").write_text("name: ci\nstate: sqlite:///.fim/state.db\n")
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    (root / "evals" / "smoke.yaml").write_text(
        "agent: echo\ncases:\n  - name: one\n    input: hi\n    expect:\n      - contains: ping\n"
    )
    out = tmp_path / "summary.md"
    code, _ = run("eval", "-p", str(root), "--markdown", str(out))
    assert code == 1
    summary = out.read_text()
    assert summary.startswith("## fim eval: ❌ failed") and "`smoke/one`: contains:" in summary


def test_failing_cases_and_checks_not_checked_are_capped():
    summary = markdown(failing(300))
    failing_lines = summary.split("### Failing cases")[1].split("### Not checked")[0]
    assert failing_lines.count("\n- `s/case") == LISTED == 50
    assert "- … and 250 more failing cases: see the JUnit report or --json" in summary
    assert "- … and 250 more checks not checked: see the JUnit report or --json" in summary
    assert len(summary) < MAX_CHARS


def test_the_whole_summary_stays_under_a_comment_s_limit():
    # 300 suites (the table is not capped), each with a long name and failing cases
    suites = [
        failing(3, "x" * 400, suite=f"suite-{n}-" + "y" * 200)["suites"][0] for n in range(300)
    ]
    report = merge([{"mode": "replay", "suites": suites}])
    summary = markdown(report)
    assert len(summary) <= MAX_CHARS == 60_000
    assert summary.rstrip().endswith("the JUnit report and --json have it all)")
    assert summary.startswith("## fim eval: ❌ failed")
