"""`fim eval` as CI runs it: exit codes, reports on disk, filters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The repository's own example, reduced to its offline demo agent and suite."""
    root = tmp_path / "helpdesk"
    root.mkdir()
    (root / "fim.yaml").write_text("name: helpdesk\nstate: sqlite:///.fim/state.db\n")
    for folder in ("agents", "evals"):
        (root / folder).mkdir()
    shutil.copy(REPO / "agents" / "demo.yaml", root / "agents" / "demo.yaml")
    for name in ("demo.yaml", "demo.script.yaml"):
        shutil.copy(REPO / "evals" / name, root / "evals" / name)
    return root


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_a_passing_suite_exits_0_and_writes_junit_and_json(project: Path, tmp_path: Path):
    junit, report = tmp_path / "out" / "junit.xml", tmp_path / "out" / "report.json"
    code, output = run(
        "eval", "--project", str(project), "--junit", str(junit), "--json", str(report)
    )
    assert code == 0, output
    assert "PASS" in output and "hooks bypassed" in output
    assert ET.parse(junit).getroot().get("failures") == "0"
    data = json.loads(report.read_text())
    assert data["ok"] and data["suites"][0]["cases"][0]["trace"][0]["type"] == "run_started"


def test_json_dash_is_the_report_on_stdout_and_the_table_on_stderr(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """promptfoo's `-o -`: `--json -` pipes the report (`fim eval --json - | jq`); it once
    wrote a file named `-`."""
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["eval", "--json", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] and "PASS" in result.stderr
    assert not (project / "-").exists()


def test_a_suite_below_its_threshold_exits_1_and_names_the_failed_assertion(project: Path):
    suite = project / "evals" / "demo.yaml"
    suite.write_text(suite.read_text().replace('contains: "391"', 'contains: "392"'))
    code, output = run("eval", "--project", str(project))
    assert code == 1
    assert "FAIL" in output and "expected '392' in" in output


def test_configuration_errors_exit_2(project: Path):
    assert run("eval", "nope", "--project", str(project))[0] == 2
    assert run("eval", "--filter", "no-such-case", "--project", str(project))[0] == 2
    (project / "evals" / "demo.yaml").write_text("agent: ghost\ncases: []\n")
    code, output = run("eval", "--project", str(project))
    assert code == 2 and "unknown agent 'ghost'" in output


def test_filter_selects_cases_by_glob(project: Path):
    code, output = run("eval", "--filter", "demo/multiplies*", "--project", str(project))
    assert code == 0 and "1 run in" in output
