"""`fim eval` as the merge gate a pull request cannot talk its way through.

- attack-43 #5: each cassette reply says which endpoint it was recorded against; replay
  refuses a reply recorded against another endpoint than the project's model settings
  name now, and every report says how many cases replayed a cassette.
- attack-43 #6: no text a case or a model wrote starts a line of the plain-text report
  (a line starting `::` is a GitHub Actions workflow command).
- newcomer7 #7: `--fail-on-skip` fails the gate on cases skipped for want of a cassette,
  the Markdown summary says them under its headline, and `fim validate` keeps its editor
  note out of CI logs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.eval.cassettes import DEFAULT_ENDPOINT, origin
from fim.testing.model_server import OpenAIStubServer

ANSWER = "It is 42, please enjoy."

AGENT = "description: an agent on a hosted model\nmodel: general\ninstructions: Answer.\n"

SUITE = """\
agent: real
cases:
  - name: answers 42 politely
    input: "What is 6*7?"
    expect: [{contains: "42"}, {icontains: "please"}]
  - name: answers 43 politely
    input: "What is 6*7+1?"
    expect: [{contains: "42"}]
"""


def fim_yaml(api_base: str | None) -> str:
    general = (
        "openai/gpt-4o-mini"
        if api_base is None
        else f"{{model: openai/gpt-4o-mini, api_base: '{api_base}'}}"
    )
    return f"name: p\nstate: sqlite:///.fim/state.db\nmodels:\n  general: {general}\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An agent on `openai/gpt-4o-mini` (the provider's own endpoint), two cases, no key."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "CI", "GITHUB_ACTIONS"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "p"
    for folder in ("agents", "evals"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(fim_yaml(None))
    (root / "agents" / "real.yaml").write_text(AGENT)
    (root / "evals" / "real.yaml").write_text(SUITE)
    return root


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def stub() -> Iterator[OpenAIStubServer]:
    with OpenAIStubServer(handler=lambda request: ANSWER) as server:
        yield server


def record_against(
    project: Path, url: str, monkeypatch: pytest.MonkeyPatch, *case: str
) -> list[dict[str, Any]]:
    """`fim eval --record` with fim.yaml pointing `general` at `url`, then fim.yaml restored:
    what a pull request can do (attack-43 #5). Returns the recorded exchanges."""
    (project / "fim.yaml").write_text(fim_yaml(url))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-recording-key-0123456789abcdef")
    filters = [arg for name in case for arg in ("-k", name)]
    code, output = run("eval", "real", "-p", str(project), "--record", *filters)
    assert code == 0, output
    monkeypatch.delenv("OPENAI_API_KEY")
    (project / "fim.yaml").write_text(fim_yaml(None))
    folder = project / "evals" / ".cassettes" / "real"
    return [
        e for f in sorted(folder.glob("*.json")) for e in json.loads(f.read_text())["exchanges"]
    ]


# ------------------------------------------------- attack-43 #5: where a cassette was recorded


def test_a_cassette_reply_names_the_origin_it_was_recorded_against(
    project: Path, stub: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    exchanges = record_against(project, stub.base_url, monkeypatch)
    assert [e["endpoint"] for e in exchanges] == [f"http://127.0.0.1:{stub.port}"] * 2


@pytest.mark.parametrize(
    ("url", "recorded"),
    [
        (None, DEFAULT_ENDPOINT),
        ("", DEFAULT_ENDPOINT),
        (
            "https://user:s3cret@Proxy.Example.com:8443/v1/key=abc?token=t",
            "https://proxy.example.com:8443",
        ),
        ("http://[::1]:9000/v1", "http://[::1]:9000"),
        ("localhost:11434/v1", "localhost:11434"),
    ],
)
def test_an_endpoint_is_recorded_as_its_origin_without_user_path_or_query(
    url: str | None, recorded: str
) -> None:
    assert origin(url) == recorded


def test_a_reply_recorded_against_a_stub_is_a_miss_naming_both_endpoints(
    project: Path, stub: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_against(project, stub.base_url, monkeypatch)
    code, output = run("eval", "real", "-p", str(project))
    assert code == 1
    assert "PASS" not in output
    flat = " ".join(output.split())
    assert (
        f"was recorded against http://127.0.0.1:{stub.port}; this run's openai/gpt-4o-mini "
        "uses the provider's default endpoint" in flat
    )
    assert "2 cassette misses" in flat


def test_a_reply_recorded_against_the_configured_endpoint_replays(
    project: Path, stub: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    record_against(project, stub.base_url, monkeypatch)
    (project / "fim.yaml").write_text(fim_yaml(stub.base_url))  # the reviewed settings say so
    code, output = run(
        "eval", "real", "-p", str(project), "-k", "42", "--json", str(tmp_path / "r.json")
    )
    assert code == 0, output
    assert "cassette miss" not in output


def test_every_report_says_how_many_cases_replayed_from_cassettes(
    project: Path, stub: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    record_against(project, stub.base_url, monkeypatch, "42 politely")
    (project / "fim.yaml").write_text(fim_yaml(stub.base_url))
    report = tmp_path / "r.json"
    code, output = run("eval", "real", "-p", str(project), "--json", str(report))
    assert code == 0, output  # one case replayed, one skipped (no cassette)
    assert "1 replayed from cassettes" in " ".join(output.split())
    data = json.loads(report.read_text())
    assert (data["cases_replayed"], data["cases_skipped"]) == (1, 1)
    replayed = {c["case"]: c["replayed"] for c in data["suites"][0]["cases"]}
    assert replayed == {"answers 42 politely": True, "answers 43 politely": False}
    code, summary = run("eval", "merge", str(report), "--format", "markdown")
    assert code == 0
    assert "1 of 2 cases replayed from cassettes" in summary
    code, text = run("eval", "merge", str(report))
    assert "1 case replayed from cassettes" in text


def test_a_cassette_from_before_endpoints_replays_and_the_summary_says_so_once(
    project: Path, stub: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_against(project, stub.base_url, monkeypatch)
    for file in (project / "evals" / ".cassettes" / "real").glob("*.json"):
        data = json.loads(file.read_text())
        for exchange in data["exchanges"]:
            del exchange["endpoint"]
        file.write_text(json.dumps(data))
    code, output = run("eval", "real", "-p", str(project), "-k", "42 politely")
    assert code == 0, output
    flat = " ".join(output.split())
    assert flat.count("do not say which endpoint") == 1
    assert "1 case replayed from cassettes that do not say which endpoint" in flat
    assert "`fim eval --record` refreshes them" in flat


# --------------------------------------------- attack-43 #6: no workflow command in plain text

INJECTED_SUITE = """\
agent: scripted
cases:
  - name: "case\\n::error::name-injection"
    input: "hi"
    expect:
      - judge: "polite"
"""

REASON = "bad\\n::error file=fim.yaml,line=1::INJECTED\\n::add-mask::FAIL"
JUDGE_SCRIPT = f"""\
- text: '{{"pass": false, "score": 0, "reason": "{REASON}"}}'
"""


@pytest.fixture
def injected(project: Path) -> Path:
    """A case whose name, and a scripted judge whose reason, hold `\\n::` lines."""
    (project / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\nmodels:\n"
        "  general: scripted:evals/agent.script.yaml\n  fast: scripted:evals/judge.script.yaml\n"
    )
    (project / "agents" / "scripted.yaml").write_text(
        "description: scripted\nmodel: general\ninstructions: Answer.\n"
    )
    (project / "evals" / "agent.script.yaml").write_text(
        "- text: 'hello\\n::warning::from the model'\n"
    )
    (project / "evals" / "judge.script.yaml").write_text(JUDGE_SCRIPT)
    (project / "evals" / "inj.yaml").write_text(INJECTED_SUITE)
    return project


def commands(output: str) -> list[str]:
    """Lines GitHub Actions would read as workflow commands."""
    return [line for line in output.splitlines() if line.lstrip().startswith("::")]


def test_no_case_name_or_judge_reason_starts_a_line_of_the_text_report(
    injected: Path, tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    code, output = run("eval", "inj", "-p", str(injected), "--json", str(report))
    assert code == 1, output
    assert commands(output) == []
    assert "case\\n::error::name-injection" in output  # escaped, on its own line's tail
    assert "bad\\n::error file=fim.yaml,line=1::INJECTED\\n::add-mask::FAIL" in output
    case = json.loads(report.read_text())["suites"][0]["cases"][0]
    assert case["case"] == "case\n::error::name-injection"  # the JSON keeps the real name


def test_no_case_name_starts_a_line_of_merge_or_baseline_text(
    injected: Path, tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    run("eval", "inj", "-p", str(injected), "--json", str(report))
    data = json.loads(report.read_text())
    data["suites"][0]["name"] = "inj\n::add-mask::FAIL"
    baseline = tmp_path / "base.json"
    base = json.loads(json.dumps(data))
    base["suites"][0]["cases"][0]["case"] = "other\n::error::removed"
    baseline.write_text(json.dumps(base))
    report.write_text(json.dumps(data))
    code, output = run("eval", "merge", str(report), "--baseline", str(baseline))
    assert code == 1
    assert "removed:" in output and "new:" in output
    assert commands(output) == []


def test_the_markdown_summary_keeps_every_case_on_one_line(injected: Path) -> None:
    code, output = run("eval", "inj", "-p", str(injected), "--format", "markdown")
    assert code == 1
    assert commands(output) == []


# ------------------------------------------------------- newcomer7 #7: skipped is not passed


def test_fail_on_skip_fails_the_run_naming_each_skipped_case(project: Path) -> None:
    code, output = run("eval", "real", "-p", str(project))
    assert code == 1, output  # every case skipped: nothing was tested (newcomer9 #4)
    assert "nothing was tested: all 2 cases were skipped" in " ".join(output.split())
    code, output = run("eval", "real", "-p", str(project), "--fail-on-skip")
    assert code == 1
    flat = " ".join(output.split())
    assert (
        "--fail-on-skip: 2 cases skipped (no cassette): real/answers 42 politely, "
        "real/answers 43 politely" in flat
    )


def test_fail_on_skip_leaves_a_shard_to_its_merge_which_fails(
    project: Path, tmp_path: Path
) -> None:
    shard = tmp_path / "shard.json"
    code, output = run(
        "eval", "real", "-p", str(project), "--shard", "1/1", "--json", str(shard), "--fail-on-skip"
    )
    assert code == 0, output
    assert "`fim eval merge --fail-on-skip` gives the verdict" in " ".join(output.split())
    code, summary = run("eval", "merge", str(shard), "--format", "markdown")
    assert code == 1  # every case skipped: nothing was tested (newcomer9 #4)
    assert summary.startswith("## fim eval: ❌ nothing was tested\n")
    assert "> ⚠️ **2 cases skipped (no cassette)**: not tested." in summary
    code, summary = run("eval", "merge", str(shard), "--format", "markdown", "--fail-on-skip")
    assert code == 1
    assert summary.startswith("## fim eval: ❌ nothing was tested\n")
    assert "`real/answers 42 politely`, `real/answers 43 politely`" in summary
    code, output = run("eval", "merge", str(shard), "--fail-on-skip")
    assert code == 1
    assert "2 cases skipped (no cassette): real/answers 42 politely" in " ".join(output.split())


def test_fail_on_skip_passes_when_nothing_was_skipped(
    project: Path, stub: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_against(project, stub.base_url, monkeypatch)
    (project / "fim.yaml").write_text(fim_yaml(stub.base_url))
    code, output = run("eval", "real", "-p", str(project), "-k", "42", "--fail-on-skip")
    assert code == 0, output


def editor_project(project: Path) -> Path:
    (project / ".vscode").mkdir()
    (project / ".vscode" / "settings.json").write_text('{"yaml.schemas": {".fim/schema/x": "*"}}')
    return project


@pytest.mark.parametrize("variable", ["CI", "GITHUB_ACTIONS"])
def test_validate_keeps_the_editor_note_out_of_ci(
    project: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    editor_project(project)
    code, output = run("validate", "-p", str(project))
    assert code == 0 and "points at .fim/schema/" in output  # at a developer's desk
    monkeypatch.setenv(variable, "true")
    code, output = run("validate", "-p", str(project))
    assert code == 0 and "points at .fim/schema/" not in output, output
