"""`fim workflow run|runs|show|resume` and `fim graph`, through the real typer commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fim.commands.workflow import register
from fim.testing.workflows import refund_above_100

WORKFLOW = refund_above_100()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "workflows").mkdir()
    (tmp_path / "fim.yaml").write_text('name: cli\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "workflows" / "refund.yaml").write_text(WORKFLOW)
    return tmp_path


@pytest.fixture
def fim(root: Path):
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """fim (test app with only the workflow commands)."""

    register(app)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [*args, "--project", str(root)])

    return invoke


def test_run_prints_progress_per_node_and_the_outputs(fim):
    result = fim("workflow", "run", "refund", "--input", "amount=20")

    assert result.exit_code == 0, result.output
    out = result.output
    assert "▶ lookup (tool)" in out and "✓ lookup" in out
    assert "↷ approve skipped: branch not taken at 'check'" in out
    assert "✓ refund" in out
    assert '"refunded": "-20"' in out


def test_run_json_prints_one_document(fim):
    result = fim("workflow", "run", "refund", "-i", "amount=20", "--json")

    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["status"] == "ok" and doc["workflow"] == "refund"
    assert doc["outputs"] == {"refunded": "-20", "approval": None}


def test_bad_inputs_are_one_line_and_exit_1(fim):
    result = fim("workflow", "run", "refund", "--input", "amount=lots")

    assert result.exit_code == 1
    assert "invalid inputs for workflow 'refund': input 'amount' = 'lots'" in result.output
    assert "Traceback" not in result.output
    assert fim("workflow", "run", "refund", "--input", "amount").exit_code == 1


def test_pause_list_show_and_resume_a_run(fim):
    started = fim("workflow", "run", "refund", "-i", "amount=250", "--json")
    assert started.exit_code == 0, started.output
    doc = json.loads(started.output)
    assert doc["status"] == "paused" and list(doc["waiting"]) == ["approve"]
    run_id = doc["run_id"]

    listed = fim("workflow", "runs")
    assert listed.exit_code == 0, listed.output
    assert run_id in listed.output and "paused" in listed.output

    shown = fim("workflow", "show", run_id)
    assert shown.exit_code == 0, shown.output
    assert "waiting" in shown.output and "Approve a refund of 250?" in shown.output

    resumed = fim("workflow", "resume", run_id, "--approve", "--input", "note=ok", "--json")
    assert resumed.exit_code == 0, resumed.output
    doc = json.loads(resumed.output)
    assert doc["status"] == "ok"
    assert doc["outputs"] == {"refunded": "-250", "approval": {"note": "ok"}}

    details = json.loads(fim("workflow", "show", run_id, "--json").output)
    assert {n: s["status"] for n, s in details["nodes"].items()} == {
        "lookup": "ok",
        "check": "ok",
        "approve": "ok",
        "refund": "ok",
    }
    assert all(s["duration_ms"] is not None for s in details["nodes"].values())
    runs = json.loads(fim("workflow", "runs", "--json").output)
    assert runs[0]["run_id"] == run_id and runs[0]["status"] == "ok"


def test_deny_fails_the_run_with_exit_1(fim):
    run_id = json.loads(fim("workflow", "run", "refund", "-i", "amount=250", "--json").output)[
        "run_id"
    ]
    result = fim("workflow", "resume", run_id, "--deny")

    assert result.exit_code == 1
    assert "✗ approve: denied by cli" in result.output
    assert fim("workflow", "resume", run_id, "--approve").exit_code == 1


def test_resume_needs_a_decision_for_a_pending_approval(fim):
    run_id = json.loads(fim("workflow", "run", "refund", "-i", "amount=250", "--json").output)[
        "run_id"
    ]
    result = fim("workflow", "resume", run_id)

    assert result.exit_code == 1
    assert "still waiting for a decision (pass --approve or --deny" in result.output
    assert fim("workflow", "resume", run_id, "--approve", "--deny").exit_code == 1


def test_show_of_an_unknown_run_exits_1(fim):
    result = fim("workflow", "show", "nope")

    assert result.exit_code == 1
    assert "no workflow run 'nope'" in result.output


def test_graph_prints_mermaid(fim, root):
    result = fim("graph", "refund")

    assert result.exit_code == 0, result.output
    assert result.output.startswith("%% workflow refund\nflowchart TD\n")
    assert "n_check -- then --> n_approve" in result.output

    target = root / "refund.mmd"
    assert fim("graph", "refund", "-o", str(target)).exit_code == 0
    assert target.read_text() == result.output

    unknown = fim("graph", "nope")
    assert unknown.exit_code == 1 and "workflows: refund" in unknown.output
