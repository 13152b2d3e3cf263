"""`fim eval` as the promptfoo user of newcomer round 6 met it, through the real CLI:

- a case recorded under `FIM_MODEL=...` and replayed without it (as CI runs it) is a
  cassette miss that names both models and how to fix it, said once (#2);
- at 80 columns the table tells two models apart (#12);
- a JUnit `<testsuite time>` is the suite's wall time, never more than the whole run's
  `<testsuites time>`; each `<testcase time>` stays the case's own (#12);
- `--baseline` of a run on one model against a run on another compares the cases (#12).

Offline: scripted models, and `fim.testing.model_server` for a real OpenAI-compatible
endpoint on the loopback interface.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.eval.report import short_names
from fim.testing.model_server import OpenAIStubServer

REPO = Path(__file__).resolve().parents[2]

HOSTED_AGENT = """\
description: An agent on a hosted model
model: general
instructions: Answer with the number.
"""

HOSTED_SUITE = """\
agent: real
cases:
  - name: times
    input: "What is 6*7?"
    expect:
      - contains: "42"
  - name: plus
    input: "What is 40+2?"
    expect:
      - contains: "42"
"""

WRONG_SCRIPT = """\
- text: "17 x 23 is about 400"
"""

A = "scripted:evals/demo.script.yaml"
B = "scripted:evals/wrong.script.yaml"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The offline demo agent and its suite, a second script that answers wrongly, and an
    agent on the `general` role (openai/gpt-4o-mini in fim.yaml) with its suite."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "FIM_FAST_MODEL"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "p"
    for folder in ("agents", "evals"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\nmodels:\n  general: openai/gpt-4o-mini\n"
    )
    shutil.copy(REPO / "agents" / "demo.yaml", root / "agents" / "demo.yaml")
    for name in ("demo.yaml", "demo.script.yaml"):
        shutil.copy(REPO / "evals" / name, root / "evals" / name)
    (root / "evals" / "wrong.script.yaml").write_text(WRONG_SCRIPT)
    (root / "agents" / "real.yaml").write_text(HOSTED_AGENT)
    (root / "evals" / "real.yaml").write_text(HOSTED_SUITE)
    return root


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStubServer]:
    """An OpenAI-compatible server the `openai/...` models reach (OPENAI_BASE_URL)."""
    with OpenAIStubServer(handler=lambda request: "It is 42") as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-stub")
        yield stub


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


# ------------------------------------------------- #2: recorded on one model, replayed on another


def test_a_replay_on_another_model_than_the_recording_says_so_and_how_to_fix_it(
    project: Path, endpoint: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FIM_MODEL", "openai/stub")  # README step 4: record on another model
    code, output = run("eval", "real", "--record", "--project", str(project))
    assert code == 0, output

    monkeypatch.delenv("FIM_MODEL")  # CI replays without it: fim.yaml's openai/gpt-4o-mini
    junit = tmp_path / "junit.xml"
    code, output = run("eval", "real", "--junit", str(junit), "--project", str(project))
    assert code == 1, output
    flat = " ".join(output.split())
    assert (
        "cassette miss: times.json was recorded with openai/stub; "
        "this run uses openai/gpt-4o-mini" in flat
    )
    assert "set the same FIM_MODEL=openai/stub (or --model) in CI" in flat
    assert "write the model into the agent or fim.yaml" in flat
    assert "re-record with `fim eval --record`" in flat
    assert "the prompt, tools or instructions changed" not in flat  # the prompt did not
    assert "cassette miss: cassette miss" not in flat  # said once
    for error in ET.parse(junit).getroot().iter("error"):
        assert error.get("message", "").startswith("cassette miss: ")
        assert "cassette miss: cassette miss" not in (error.text or "")

    monkeypatch.setenv("FIM_MODEL", "openai/stub")  # the fix the message names
    code, output = run("eval", "real", "--project", str(project))
    assert code == 0, output


def test_a_changed_prompt_on_the_recorded_model_still_blames_the_prompt(
    project: Path, endpoint: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, output = run("eval", "real", "--record", "--project", str(project))
    assert code == 0, output
    suite = project / "evals" / "real.yaml"
    suite.write_text(suite.read_text().replace("6*7", "7*6"))
    code, output = run("eval", "real", "--project", str(project))
    flat = " ".join(output.split())
    assert code == 1
    assert (
        "cassette miss: times.json: the request of agent 'real' (iteration 1) was not "
        "recorded: its messages changed since recording" in flat
    )
    assert "was recorded with" not in flat and "cassette miss: cassette miss" not in flat


# ------------------------------------------------------- #12: the model column at 80 columns


def test_the_table_tells_two_models_apart_at_80_columns(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, output = run("eval", "demo", "--model", A, "--model", B, "--project", str(project))
    assert code == 1, output
    rows = [line for line in output.splitlines() if line.startswith("│ demo")]
    assert len(rows) == 2 and all(len(row) <= 80 for row in rows), output
    cells = [row.split("│")[2].strip() for row in rows]
    assert cells[0] != cells[1]
    assert "demo" in cells[0] and "wrong" in cells[1]  # what tells them apart is kept


@pytest.mark.parametrize(
    ("names", "width"),
    [
        ([A, B], 14),
        (["anthropic/claude-3-5-sonnet-20240620", "anthropic/claude-3-5-sonnet-20241022"], 12),
        (["openai/gpt-4o", "openai/gpt-4o-mini-2024-07-18"], 10),
        (["openai/gpt-4o", "ollama/qwen2.5-coder:32b-instruct"], 9),
    ],
)
def test_shortened_model_names_fit_and_stay_distinct(names: list[str], width: int) -> None:
    shown = short_names(names, width)
    assert len(set(shown.values())) == len(names)
    assert all(len(text) <= width for text in shown.values()) or shown == {n: n for n in names}


# ---------------------------------------------------------- #12: JUnit suite and run times


def test_junit_suite_time_is_wall_time_within_the_run_time(
    project: Path, endpoint: OpenAIStubServer, tmp_path: Path
) -> None:
    # Both cases' model calls are held until both are in flight, then answered after
    # 0.3 s: the cases overlap, so their latencies add up to more than the suite took.
    endpoint.gather_next(2)
    endpoint.latency = 0.3
    junit, report = tmp_path / "junit.xml", tmp_path / "report.json"
    code, output = run(
        "eval", "real", "--live", "--junit", str(junit), "--json", str(report),
        "--project", str(project),
    )  # fmt: skip
    assert code == 0, output
    merged = tmp_path / "merged.xml"
    code, output = run("eval", "merge", str(report), "--junit", str(merged))
    assert code == 0, output
    for path in (junit, merged):
        root = ET.parse(path).getroot()
        (suite,) = root.findall("testsuite")
        cases = [float(c.get("time", "")) for c in suite.findall("testcase")]
        assert len(cases) == 2 and min(cases) >= 0.3  # each case keeps its own time
        assert float(suite.get("time", "")) <= float(root.get("time", ""))
        assert float(suite.get("time", "")) < sum(cases)  # wall time, not the sum
    (data,) = json.loads(report.read_text())["suites"]
    assert data["duration_s"] <= json.loads(report.read_text())["duration_s"]


# ------------------------------------------------- #12: --baseline of one model against another


def test_baseline_of_one_model_compares_the_cases_of_another(project: Path, tmp_path: Path) -> None:
    baseline = tmp_path / "base.json"
    code, output = run("eval", "demo", "--json", str(baseline), "--project", str(project))
    assert code == 0, output

    code, output = run(
        "eval", "demo", "-m", B, "--baseline", str(baseline), "--project", str(project)
    )  # fmt: skip
    assert code == 1, output
    flat = " ".join(output.split())
    assert "baseline: 1 regressed, 0 improved" in flat
    assert f"models differ: baseline each agent's own model, this run {B}" in flat
    assert "regressed: demo/multiplies with the calculator" in flat
    assert "new:" not in flat and "removed:" not in flat

    code, output = run(
        "eval", "demo", "-m", A, "--baseline", str(baseline), "--format", "markdown",
        "--project", str(project),
    )  # fmt: skip
    assert code == 0, output
    assert f"models differ: baseline each agent's own model, this run {A}" in output
    assert "**New**" not in output and "**Removed**" not in output


def test_a_baseline_of_several_models_is_still_compared_model_by_model(
    project: Path, tmp_path: Path
) -> None:
    baseline = tmp_path / "base.json"
    run("eval", "demo", "-m", A, "-m", B, "--json", str(baseline), "--project", str(project))
    code, output = run(
        "eval", "demo", "-m", A, "--baseline", str(baseline), "--project", str(project)
    )  # fmt: skip
    assert code == 0, output
    assert "models differ" not in output
    assert f"removed: demo [{B}]/multiplies with the calculator" in " ".join(output.split())
