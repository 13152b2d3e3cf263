"""`fim validate` reads `evals/.cassettes/` (newcomer51 #5).

A renamed case left its cassette behind (the case skipped for want of one), and a cassette
two pull requests re-recorded kept git's conflict markers: `fim validate --strict` passed
both. Each is now a warning at the file, the first naming the case it was likely for.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app

RECORDING = '{"exchanges": [], "tool_calls": []}\n'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "evals" / ".cassettes" / "support").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: ci\nstate: sqlite:///.fim/state.db\n")
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    (root / "evals" / "support.yaml").write_text(
        "agent: echo\ncases:\n"
        "  - {name: order status, input: hi, expect: [contains: pong]}\n"
        "  - {name: no apology, input: hi, expect: [contains: pong]}\n"
    )
    (root / "evals" / ".cassettes" / "support" / "order-status.json").write_text(RECORDING)
    return root


def validate(root: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["validate", "--strict", "-p", str(root)])
    return result.exit_code, result.output


def test_cassettes_of_the_cases_are_no_warning(project: Path):
    code, output = validate(project)
    assert code == 0, output


def test_a_cassette_of_no_case_is_a_warning_naming_the_likely_case(project: Path):
    (project / "evals" / ".cassettes" / "support" / "no-refusal.json").write_text(RECORDING)
    code, output = validate(project)
    assert code == 1
    assert (
        "evals/.cassettes/support/no-refusal.json:1:1: cassette no-refusal.json belongs to "
        "no case of suite 'support' (renamed? git mv it to no-apology.json)"
    ) in output


def test_a_cassette_with_conflict_markers_is_a_warning_at_the_marker(project: Path):
    path = project / "evals" / ".cassettes" / "support" / "order-status.json"
    path.write_text(f"<<<<<<< HEAD\n{RECORDING}=======\n{RECORDING}>>>>>>> theirs\n")
    code, output = validate(project)
    assert code == 1
    assert (
        "evals/.cassettes/support/order-status.json:1:1: cassette is not a recording: it has "
        "git conflict markers (two recordings merged) (fim eval --record -k 'support/order "
        "status' records it again)"
    ) in output


def test_a_cassette_that_is_not_json_is_a_warning_at_its_line(project: Path):
    path = project / "evals" / ".cassettes" / "support" / "order-status.json"
    path.write_text('{\n  "exchanges": [\n  oops\n}\n')
    code, output = validate(project)
    assert code == 1
    assert "order-status.json:3:1: cassette is not a recording: not JSON" in output
