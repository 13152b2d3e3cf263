"""`fim eval merge` knows when a shard is missing (newcomer51 #1).

A shard's JSON report says which shard it is; the merge exits 2 naming the shard whose
report it was not given (a CI job that died before uploading it), instead of passing over
the shards that survived. Reports without shard information merge as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.eval.report_file import checked_report


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
    cases = "".join(
        f"  - name: case {i}\n    input: hi\n    expect:\n      - contains: pong\n"
        for i in range(6)
    )
    (root / "evals" / "smoke.yaml").write_text(f"agent: echo\ncases:\n{cases}")
    return root


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def shard(project: Path, tmp_path: Path, index: int, total: int) -> Path:
    out = tmp_path / f"shard-{index}-of-{total}.json"
    code, output = run(
        "eval", "-p", str(project), "--shard", f"{index}/{total}", "--json", str(out)
    )
    assert code == 0, output
    return out


def test_a_shard_report_says_which_shard_it_is(project: Path, tmp_path: Path):
    report = json.loads(shard(project, tmp_path, 2, 3).read_text())
    assert report["shard"] == {"index": 2, "total": 3}


def test_merging_without_a_shard_exits_2_naming_it(project: Path, tmp_path: Path):
    first, second = shard(project, tmp_path, 1, 2), shard(project, tmp_path, 2, 2)
    assert run("eval", "merge", str(first), str(second))[0] == 0
    code, output = run("eval", "merge", str(first))
    assert code == 2
    assert "error: shard 2/2 missing: merge every shard's report" in output
    code, output = run("eval", "merge", str(shard(project, tmp_path, 2, 4)))
    assert code == 2 and "shards 1/4, 3/4, 4/4 missing" in output


def test_shards_of_runs_with_another_n_are_refused(project: Path, tmp_path: Path):
    code, output = run(
        "eval", "merge", str(shard(project, tmp_path, 1, 2)), str(shard(project, tmp_path, 2, 3))
    )
    assert code == 2 and "shards of runs with different N" in output


def test_reports_without_shard_information_merge_as_before(tmp_path: Path):
    case = {"case": "c", "passed": True, "latency_ms": 1.0}
    old = {"mode": "replay", "suites": [{"name": "s", "threshold": 1.0, "cases": [case]}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    code, output = run("eval", "merge", str(path))
    assert code == 0 and "missing" not in output
    checked = checked_report(old)
    assert isinstance(checked, dict) and checked["shard"] is None


def test_a_shard_index_outside_its_total_is_no_report():
    bad = {"suites": [], "shard": {"index": 3, "total": 2}}
    assert checked_report(bad) == ("shard.total: shard 3/2: the index should be between 1 and N")
