"""Evals in CI: stable shards, merging shard reports, baseline comparison, Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.errors import RunError
from fim.eval.baseline import compare
from fim.eval.ci import in_shard, merge, parse_shard
from fim.eval.ci_markdown import markdown

CASES = [f"case {i}" for i in range(8)]


def suite_yaml(failing: set[str] = frozenset()) -> str:
    lines = ["agent: echo", "threshold: 0.5", "cases:"]
    for name in CASES:
        expected = "ping" if name in failing else "pong"
        lines += [
            f"  - name: {name}",
            "    input: hi",
            "    expect:",
            f"      - contains: {expected}",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "evals").mkdir()
    (root / "fim.yaml").write_text("name: ci\nstate: sqlite:///.fim/state.db\n")
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    (root / "evals" / "smoke.yaml").write_text(suite_yaml())
    return root


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_shards_partition_the_cases_stably():
    for n in (1, 2, 3, 5):
        owners = [[i for i in range(1, n + 1) if in_shard("s", c, (i, n))] for c in CASES]
        assert all(len(o) == 1 for o in owners)  # every case in exactly one shard
        assert owners == [[i for i in range(1, n + 1) if in_shard("s", c, (i, n))] for c in CASES]
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x", "1/0"):
        with pytest.raises(RunError):
            parse_shard(bad)


def test_sharded_runs_merge_into_one_junit_and_compare_with_a_baseline(
    project: Path, tmp_path: Path
):
    shards = []
    for i in (1, 2, 3):
        out = tmp_path / f"shard-{i}.json"
        code, output = run("eval", "-p", str(project), "--shard", f"{i}/3", "--json", str(out))
        assert code == 0, output
        shards.append(out)
    counts = [
        len(json.loads(p.read_text())["suites"][0]["cases"])
        if json.loads(p.read_text())["suites"]
        else 0
        for p in shards
    ]
    assert sum(counts) == len(CASES)
    junit, merged = tmp_path / "junit.xml", tmp_path / "merged.json"
    code, output = run(
        "eval", "merge", *map(str, shards), "--junit", str(junit), "--json", str(merged)
    )
    assert code == 0, output
    assert "smoke: 8 cases, 100% (threshold 50%) PASS" in output
    root = ET.parse(junit).getroot()
    assert root.get("tests") == "8" and root.get("failures") == "0"
    # overlapping shards are refused, not double counted
    assert run("eval", "merge", str(shards[0]), str(shards[0]))[0] == 2

    # two cases now fail: still above the suite threshold, but a regression against main
    (project / "evals" / "smoke.yaml").write_text(suite_yaml({"case 1", "case 6"}))
    code, output = run(
        "eval", "-p", str(project), "--baseline", str(merged), "--format", "markdown"
    )
    assert code == 1, output
    assert "## fim eval: ❌ regressed" in output
    assert "**Regressed** (2): `smoke/case 1`, `smoke/case 6`" in output
    assert "`smoke/case 1`: contains: expected 'ping'" in output
    # and back: the baseline of the failing run sees them improve; exit follows the verdict
    failing = tmp_path / "failing.json"
    run("eval", "-p", str(project), "--json", str(failing))
    (project / "evals" / "smoke.yaml").write_text(suite_yaml())
    code, output = run("eval", "-p", str(project), "--baseline", str(failing))
    assert code == 0 and "improved: smoke/case 1" in output


def _report(latency: float, tokens: int, cost: float | None, passed: bool = True) -> dict:
    trace = [{"type": "run_finished", "usage": {"cost": cost}}]
    case = {
        "case": "c",
        "attempt": 1,
        "passed": passed,
        "skipped": None,
        "latency_ms": latency,
        "tokens": tokens,
        "trace": trace,
    }
    return merge([{"suites": [{"name": "s", "threshold": 1.0, "cases": [case]}], "mode": "replay"}])


def test_cost_and_latency_changes_beyond_the_threshold_are_reported():
    base = _report(1000.0, 400, 0.01)
    same = compare(_report(1100.0, 410, 0.011), base, threshold=0.2)
    assert same.ok and not same.changes
    slower = compare(_report(1500.0, 900, 0.03), base, threshold=0.2)
    assert slower.ok and [c.metric for c in slower.changes] == ["latency_ms", "tokens", "cost"]
    text = markdown(_report(1500.0, 900, 0.03), slower)
    assert "| `s/c` | latency_ms | 1000 | 1500 | +50% |" in text
    worse = compare(_report(1000.0, 400, 0.01, passed=False), base)
    assert worse.regressed == ["s/c"] and not worse.ok
