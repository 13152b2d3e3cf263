"""newcomer55 #2: a cassette records the hooks mode it was made in, and a replay in the
other mode that misses says so, instead of advising `--record` (which, without hooks,
would run for real the very refund the guard had blocked). `--rerun-failed` takes the
report's hooks mode unless a flag overrides it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.eval.test_newcomer55_hooks_gate import fim_eval, project


@pytest.fixture
def refunds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "refunds.log"
    monkeypatch.setenv("REFUNDS_LOG", str(log))
    return log


def cassette(root: Path) -> dict[str, object]:
    path = root / "evals" / ".cassettes" / "support" / "large-refund-escalates.json"
    return json.loads(path.read_text())


def test_a_recording_says_its_hooks_mode_and_what_the_hooks_blocked(tmp_path: Path, refunds: Path):
    root = project(tmp_path)
    code, output = fim_eval(root, "--record", "--with-hooks")
    assert code == 0, output
    recorded = cassette(root)
    assert recorded["hooks"] == "on"
    assert recorded["blocked"] == ["issue_refund"]
    assert not refunds.exists()


def test_a_replay_without_the_hooks_it_was_recorded_with_names_the_real_cause(
    tmp_path: Path, refunds: Path
):
    """The persona recorded with `--with-hooks`, then CI replayed without: the miss said
    `fim eval --record` records it, and following that ran the real refund."""
    root = project(tmp_path)
    assert fim_eval(root, "--record", "--with-hooks")[0] == 0
    code, output = fim_eval(root, "--without-hooks")
    assert code == 1, output
    said = " ".join(output.split())
    assert (
        "cassette miss: large-refund-escalates.json was recorded with hooks on: issue_refund "
        "was blocked then; this run bypasses hooks (tool call issue_refund was not recorded"
    ) in said
    assert "replay it with hooks as recorded (`hooks: on` in the suite" in said
    assert "`fim eval --record` without hooks would run for real what the hooks blocked" in said
    assert not refunds.exists()
    assert fim_eval(root, "--with-hooks")[0] == 0  # the same mode replays


def test_a_recording_without_hooks_says_off(tmp_path: Path, refunds: Path):
    root = project(tmp_path)
    assert fim_eval(root, "--record", "--without-hooks")[0] == 0
    recorded = cassette(root)
    assert recorded["hooks"] == "off" and "blocked" not in recorded


def test_rerun_failed_takes_the_report_hooks_mode(tmp_path: Path, refunds: Path):
    """A hooks-on report's failed case reran without hooks (the report's `"hooks": "on"`
    was not carried over): now it reruns with them, and a flag still decides."""
    root = project(tmp_path)
    suite = root / "evals" / "support.yaml"
    suite.write_text(suite.read_text() + "      - contains: a sentence the agent never says\n")
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    code, output = fim_eval(root, "--with-hooks", "--json", str(first))
    assert code == 1, output
    code, output = fim_eval(root, "--rerun-failed", str(first), "--json", str(again))
    assert code == 1, output  # failed as before: ran with hooks, not refused (2)
    assert json.loads(again.read_text())["suites"][0]["hooks"] == "on"
    assert not refunds.exists()
    code, output = fim_eval(root, "--rerun-failed", str(first), "--without-hooks")
    assert "hooks bypassed" in output and refunds.exists()
