"""A committed cassette that is not a recording fails its case, not the eval (attack-53 F2).

Cassettes are committed by contributors like code and can say anything: one nested 100,000
deep (RecursionError in the JSON parser), an exchange without its `response` (KeyError) or
with a response of the wrong shape (ValidationError) ended `fim eval` with a traceback,
exit 1 and no report for any suite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fim.errors import RunError
from fim.eval.cassettes import Cassette
from tests.inprocess_cli import run_fim

GOOD = {"role": "assistant", "content": "done"}


def cassette(tmp_path: Path, text: str) -> Cassette:
    path = tmp_path / "c1.json"
    path.write_text(text)
    return Cassette(path, "replay")


def test_a_cassette_nested_too_deep_is_broken_not_a_crash(tmp_path: Path) -> None:
    deep = '{"version": 2, "exchanges": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    recorded = cassette(tmp_path, deep)
    with pytest.raises(RunError, match=r"c1\.json is not a recording: nested too deep"):
        recorded.lookup("k")


@pytest.mark.parametrize(
    "entry",
    [{"key": "k"}, {"key": "k", "response": {"message": 5}}, {"key": "k", "response": "x"}],
    ids=["no-response", "wrong-shape", "not-an-object"],
)
def test_a_broken_reply_fails_the_lookup_with_the_cassettes_name(
    tmp_path: Path, entry: dict[str, object]
) -> None:
    recorded = cassette(tmp_path, json.dumps({"version": 2, "exchanges": [entry]}))
    with pytest.raises(RunError, match=r"cassette c1\.json holds a broken response"):
        recorded.lookup("k")
    assert recorded.lookup("other") is None  # a reply not recorded is a miss, as before


def test_fim_eval_reports_the_case_and_every_other_suite(tmp_path: Path) -> None:
    root = tmp_path / "p"
    for folder in ("agents", "evals/.cassettes/broken"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        'name: e\nstate: "sqlite:///.fim/state.db"\nmodels:\n'
        '  general: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:9/v1"}\n'
    )
    (root / "agents" / "calc.yaml").write_text("description: c\nmodel: general\n")
    (root / "s.yaml").write_text("- text: Done\n")
    (root / "agents" / "offline.yaml").write_text("description: o\nmodel: scripted:s.yaml\n")
    (root / "evals" / "broken.yaml").write_text(
        "agent: calc\ncases:\n  - name: c1\n    input: hi\n    expect: [{contains: Done}]\n"
    )
    (root / "evals" / "fine.yaml").write_text(
        "agent: offline\ncases:\n  - name: c1\n    input: hi\n    expect: [{contains: Done}]\n"
    )
    (root / "evals" / ".cassettes" / "broken" / "c1.json").write_text(
        '{"version": 2, "exchanges": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    done = run_fim("eval", "--project", str(root), cwd=root, timeout=120)
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not a recording: nested too deep" in done.stdout + done.stderr
    assert "fine" in done.stdout and "PASS" in done.stdout  # the other suite's report
