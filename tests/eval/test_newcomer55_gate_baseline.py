"""`fim eval --baseline` as a gate on cost, tokens and latency (newcomer55 #4 and #5).

- `--fail-on-change cost,tokens,latency` fails the gate (exit 1) when a case's metric rose
  more than `--threshold` over the baseline; without it changes are only listed, as before.
  It needs `--baseline`, and names only known metrics (exit 2 before any case runs).
- The comparison is in the `--json` report and the merged one: `baseline.ok`,
  `regressed`, `improved`, `changes[]` with metric, before, after and ratio, and the
  `failing_changes` the gate failed on.
- The suites' table (terminal and Markdown) has each suite's tokens and cost.
- Two replayed runs compare the latency their cassettes recorded (`recorded_latency_ms`,
  it moves when someone re-records); a scripted case's latency (fim's own time) is left
  out, and a latency change under 100 ms is noise whatever its ratio.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fim.cli import app
from fim.eval.baseline import compare
from fim.eval.ci import merge
from fim.eval.ci_markdown import markdown
from tests.eval_projects import pong_project


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def case(name: str = "order status", **fields: Any) -> dict[str, Any]:
    return {
        "case": name,
        "passed": True,
        "status": "pass",
        "latency_ms": 300.0,
        "tokens": 465,
        "cost": 7.245e-05,
        **fields,
    }


def report(*cases: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "replay", "suites": [{"name": "llm", "threshold": 1.0, "cases": list(cases)}]}


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


MAIN = report(case())
PR = report(case(tokens=719, cost=0.00011055))  # the prompt grew by 55%


def test_a_cost_rise_past_the_threshold_fails_the_gate_with_fail_on_change(tmp_path: Path):
    main, pr = write(tmp_path / "main.json", MAIN), write(tmp_path / "pr.json", PR)
    out, md = tmp_path / "eval.json", tmp_path / "s.md"
    args = ("eval", "merge", str(pr), "--baseline", str(main), "--threshold", "0.2")
    code, output = run(*args, "--json", str(out), "--markdown", str(md))
    assert code == 0, output  # listed, not a gate, without --fail-on-change
    assert "cost llm/order status: 7.245e-05 -> 0.00011055 (+53%)" in output
    code, output = run(*args, "--fail-on-change", "cost,tokens", "--json", str(out))
    assert code == 1, output
    assert "2 over --threshold (--fail-on-change cost,tokens)" in output
    assert "FAILS the gate (--fail-on-change)" in output
    compared = json.loads(out.read_text())["baseline"]
    assert compared["ok"] is False and compared["fail_on_change"] == ["cost", "tokens"]
    assert compared["regressed"] == [] and compared["improved"] == []
    tokens = {"case": "llm/order status", "metric": "tokens", "before": 465, "after": 719}
    assert {**tokens, "ratio": 0.5462} in compared["changes"]
    assert [c["metric"] for c in compared["failing_changes"]] == ["tokens", "cost"]


def test_only_an_increase_of_a_named_metric_fails_the_gate():
    cheaper = compare(MAIN, PR, 0.2, ("cost", "tokens"))  # PR as the baseline: costs fell
    assert cheaper.ok and cheaper.changes and not cheaper.over
    tokens_only = compare(report(case(tokens=470, cost=0.00011055)), MAIN, 0.2, ("tokens",))
    assert tokens_only.ok and [c.metric for c in tokens_only.changes] == ["cost"]


def test_fail_on_change_needs_a_baseline_and_known_metrics(tmp_path: Path):
    code, output = run("eval", "-p", str(tmp_path), "--fail-on-change", "cost")
    assert code == 2 and "there is no --baseline" in output
    main = write(tmp_path / "main.json", MAIN)
    code, output = run("eval", "--baseline", str(main), "--fail-on-change", "cost,price")
    assert code == 2 and "unknown metric price" in output
    assert "cost, tokens, latency" in output


def test_the_help_says_what_fails_the_gate():
    code, output = run("eval", "--help")
    flat = " ".join(output.replace("│", " ").split())
    assert code == 0
    assert "exit 1 when a case that passed there fails now, or with --fail-on-change" in flat
    assert "--fail-on-change METRICS With --baseline: exit 1 when a case's cost" in flat
    assert "any of cost, tokens and latency, comma-separated" in flat


def test_the_suites_table_has_each_suites_tokens_and_cost():
    merged = merge([report(case(), case("refund", tokens=100, cost=None))])
    suite = merged["suites"][0]
    assert suite["tokens"] == 565 and suite["cost"] == 7.245e-05
    text = markdown(merged)
    assert "| suite | cases | passed | rate | threshold | result | tokens | cost |" in text
    assert "| llm | 2 | 2 | 100% | 100% | PASS | 565 | $0.000072 |" in text


def test_the_markdown_headline_and_changes_table_say_the_gate_failed_on_cost():
    comparison = compare(PR, MAIN, 0.2, ("cost",))
    text = markdown(merge([PR]), comparison)
    assert "## fim eval: ❌ cost rose" in text
    both = compare(
        report(case(tokens=719, cost=0.00011055, latency_ms=900.0)), MAIN, 0.2, ("latency", "cost")
    )
    assert "## fim eval: ❌ cost, latency rose" in markdown(merge([PR]), both)
    assert "An increase of cost beyond it fails the gate." in text
    assert "| `llm/order status` | cost | 7.245e-05 | 0.00011055 | +53% | FAIL |" in text
    assert "| `llm/order status` | tokens | 465 | 719 | +55% | |" in text


# ------------------------------------------------------------------------ #5 latency


def scripted(latency: float) -> dict[str, Any]:
    trace = [{"type": "llm_call", "model": "scripted:evals/support.script.yaml"}]
    return case("greeting", latency_ms=latency, tokens=448, cost=0.0, trace=trace)


def test_two_replayed_runs_compare_the_recorded_model_latency():
    before = report(case(replayed=True, latency_ms=290.0, recorded_latency_ms=823.0))
    after = report(case(replayed=True, latency_ms=292.0, recorded_latency_ms=1330.0))
    comparison = compare(after, before, 0.2, ("latency",))
    [change] = comparison.changes
    assert (change.metric, change.before, change.after) == ("recorded_latency_ms", 823, 1330)
    assert not comparison.ok  # --fail-on-change latency covers the recorded latency
    unknown = report(case(replayed=True, recorded_latency_ms=None))
    assert compare(unknown, before).changes == []


def test_a_scripted_cases_own_time_is_not_compared():
    # the first run's start-up (366.8 ms) against a warm one (7.9 ms): fim's time, not a model's
    assert compare(report(scripted(7.9)), report(scripted(366.8))).changes == []
    assert compare(report(scripted(1400.0)), report(scripted(57.0))).changes == []


def test_a_latency_change_under_100_ms_is_noise_whatever_its_ratio():
    assert compare(report(case(latency_ms=112.0)), report(case(latency_ms=36.4))).changes == []
    [change] = compare(report(case(latency_ms=1200.0)), report(case(latency_ms=300.0))).changes
    assert change.metric == "latency_ms"


def test_the_terminal_table_has_each_suites_tokens_and_cost_or_a_line_under_it(tmp_path: Path):
    root = tmp_path / "p"
    pong_project(
        root,
        {"smoke.yaml": "agent: echo\ncases:\n  - {name: a, input: hi, expect: [contains: pong]}\n"},
    )
    wide = CliRunner().invoke(app, ["eval", "-p", str(root)], env={"COLUMNS": "200"}).output
    header = next(line for line in wide.splitlines() if "suite" in line)
    assert "tokens" in header and "cost" in header
    assert "$0.000000" in wide  # a scripted model costs nothing
    narrow = CliRunner().invoke(app, ["eval", "-p", str(root)], env={"COLUMNS": "60"}).output
    assert "tokens and cost: smoke " in narrow and " tokens, $0.000000" in narrow
