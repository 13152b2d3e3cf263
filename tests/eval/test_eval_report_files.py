"""The JSON reports `fim eval` reads back (`merge`, `--baseline`, `--rerun-failed`) and the
Markdown summary it writes for a pull request (attack-48 F2, F3).

A shard uploaded by a pull request's job or a baseline kept elsewhere may have any shape:
each is checked against the report's model first, and a wrong one is one line naming the
field, exit 2, never a traceback (which exited 1, read as a failed suite). The summary
quotes the model's output: a bare URL in it is not turned into a link by GitHub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.errors import RunError
from fim.eval.ci import load
from fim.eval.ci_markdown import markdown
from fim.eval.rerun import failed_cases

ROOT = Path(__file__).resolve().parents[2]

CASE = {"suite": "s", "case": "c1", "passed": False, "status": "fail", "output": "no"}


@pytest.mark.parametrize(
    ("report", "said"),
    [
        ({"suites": [None]}, "suites[0]: should be an object"),
        ({"suites": [{"cases": 5}]}, "suites[0].name: field required, and 1 more problem"),
        (
            {"suites": [{"name": "s", "cases": [{"name": "c1", "passed": False}]}]},
            "suites[0].cases[0].case: field required",
        ),
        (
            {"suites": [{"name": "s", "threshold": "a", "cases": []}]},
            "suites[0].threshold: input should be a valid number",
        ),
    ],
    ids=["null-suite", "cases-a-number", "case-without-name", "threshold-a-text"],
)
def test_a_report_of_the_wrong_shape_is_one_line_naming_its_field(
    tmp_path: Path, report: object, said: str
) -> None:
    path = tmp_path / "shard.json"
    path.write_text(json.dumps(report))
    result = CliRunner().invoke(app, ["eval", "merge", str(path)])
    assert result.exit_code == 2, result.output
    assert f"error: {path}: not a fim eval JSON report ({said}" in " ".join(result.output.split())
    assert isinstance(result.exception, SystemExit)  # an exit, not a crash
    with pytest.raises(RunError, match="not a fim eval JSON report"):
        failed_cases(path, {})


def test_a_report_fim_wrote_reads_back_as_it_was_written(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    code = CliRunner().invoke(app, ["eval", "-p", str(ROOT), "--json", str(path)]).exit_code
    assert code == 0
    assert load(path) == json.loads(path.read_text())


def test_an_older_report_missing_fields_fim_reads_gets_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"suites": [{"name": "s", "cases": [CASE]}]}))
    report = load(path)
    assert report["suites"][0]["threshold"] == 1.0 and report["ok"] is False
    assert report["suites"][0]["cases"][0]["attempt"] == 1


def test_the_markdown_summary_links_no_url_the_model_wrote(tmp_path: Path) -> None:
    output = "Re-run CI at https://evil.example/login?next=ci or www.evil.example/x"
    path = tmp_path / "r.json"
    failing = {
        **CASE,
        "assertions": [{"kind": "contains", "passed": False, "message": f"got {output!r}"}],
    }
    path.write_text(
        json.dumps({"ok": False, "suites": [{"name": "s", "cases": [failing], "threshold": 1}]})
    )
    summary = markdown(load(path))
    assert "evil.example" in summary  # quoted, as written but for the breaks
    assert "https://" not in summary and "www." not in summary
    assert "https\u200b://evil.example" in summary and "www\u200b.evil.example" in summary
