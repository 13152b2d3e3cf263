"""`fim eval` and `fim validate` say the right cause in a CI job (newcomer51 #10, #12).

- Google ADK's eval files in `evals/` (`*.evalset.json`, `*.test.json`,
  `test_config.json`) were ignored silently: `fim validate` warns at each with fim's
  words for an eval_case, and `fim eval evals/x.evalset.json` says why it is no suite.
- promptfoo's `--grader` and `--share` got click's closest option (`--record`,
  `--shard`): they get fim's words.
- `fim eval merge` with no reports said "no fim.yaml"; a missing `--baseline` said
  "not a fim eval JSON report ([Errno 2] ...)".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "evals").mkdir()
    (root / "fim.yaml").write_text("name: ci\nstate: sqlite:///.fim/state.db\n")
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    (root / "evals" / "smoke.yaml").write_text(
        "agent: echo\ncases:\n  - {name: one, input: hi, expect: [contains: pong]}\n"
    )
    return root


EVALSET = {"eval_set_id": "basic", "eval_cases": [{"eval_id": "greeting"}]}


def test_validate_warns_at_each_adk_eval_file_with_the_mapping(tmp_path: Path):
    root = project(tmp_path / "p")
    (root / "evals" / "basic.evalset.json").write_text(json.dumps(EVALSET))
    (root / "evals" / "test_config.json").write_text('{"criteria": {}}')
    code, output = run("validate", "-p", str(root))
    assert code == 0
    flat = " ".join(output.split())
    assert "evals/basic.evalset.json:1:1: warning: ADK eval set: fim does not read it" in flat
    assert "{name: <eval_id>, input: <user_content text>" in flat
    assert "tool_sequence: {tools: [<tool_uses names>], mode: exact}, judge: <rubric>" in flat
    assert "evals/test_config.json:1:1: warning: ADK eval criteria" in flat
    assert "tool_trajectory_avg_score is a case's `tool_sequence" in flat
    code, _ = run("validate", "-p", str(root), "--strict")
    assert code == 1


def test_eval_says_why_a_json_file_is_not_a_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = project(tmp_path / "p")
    (root / "evals" / "basic.evalset.json").write_text(json.dumps(EVALSET))
    monkeypatch.chdir(root)
    code, output = run("eval", "evals/basic.evalset.json")
    flat = " ".join(output.split())
    assert code == 2
    assert "evals/basic.evalset.json: ADK eval set: fim does not read it" in flat
    code, output = run("eval", "main.json")
    assert code == 2 and "main.json: not an eval suite: a suite is evals/<name>.yaml" in output


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("--grader=openai/gpt-4o", "judges run on the `fast` role (FIM_FAST_MODEL=MODEL"),
        ("--share", "fim has no hosted viewer: --format markdown"),
    ],
)
def test_promptfoo_flags_get_fims_words(flag: str, said: str):
    code, output = run("eval", flag)
    assert code == 2
    assert said in " ".join(output.split())
    assert "Possible options" not in output


def test_merge_without_reports_asks_for_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # no project here, as in a CI report job
    code, output = run("eval", "merge")
    assert code == 2
    assert "fim eval merge: no reports given (name the shards' JSON reports" in output
    assert "no fim.yaml" not in output
    monkeypatch.chdir(project(tmp_path / "p"))  # in a project with no suite named merge
    code, output = run("eval", "merge")
    assert code == 2 and "no reports given" in output


def test_a_missing_baseline_says_it_does_not_exist(tmp_path: Path):
    report = tmp_path / "pr.json"
    suite = {"name": "s", "threshold": 1.0, "cases": [{"case": "a", "passed": True}]}
    report.write_text(json.dumps({"mode": "replay", "suites": [suite]}))
    code, output = run("eval", "merge", str(report), "--baseline", str(tmp_path / "main.json"))
    assert code == 2
    assert "main.json does not exist (first run on main?" in output
    assert "Errno" not in output
