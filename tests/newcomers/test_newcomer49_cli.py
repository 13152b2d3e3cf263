"""Newcomer 49's command-line findings, each stated as the behaviour fixed: `fim runs show`
draws a run as `fim run -v` does and takes a unique start of an id or `last`, `fim run -v`
names its run; guessed commands and options (`fim chat`, `fim dev`, `--resume`) are routed
to fim's own; `fim run AGENT -` reads stdin, and piped stdin loses its last newline; a
prompt typed where the agent goes gets the usage; TAB completes agent and workflow names,
kinds, run ids and approval ids without compiling the project."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.store import Store

runner = CliRunner()

SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: "42, says the calculator"
"""


def cli(*args: str, input: str | None = None) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Agents `assistant` and `helper` on a script (a calculator call, then an answer),
    workflow `tip`, a SQLite store."""
    files = {
        "fim.yaml": "name: p\nstate: sqlite:///.fim/state.db\n",
        "s.yaml": SCRIPT,
        "agents/assistant.yaml": "description: a\nmodel: scripted:s.yaml\ntools: [calculator]\n",
        "agents/helper.yaml": "description: h\nmodel: scripted:s.yaml\ntools: [calculator]\n",
        "workflows/tip.yaml": (
            "description: w\nnodes:\n  calc: {type: tool, tool: calculator, "
            "args: {expression: '1+1'}}\n"
        ),
    }
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    return tmp_path


def run_ids(root: Path) -> list[str]:
    code, out, err = cli("runs", "list", "--json", "-p", str(root))
    assert code == 0, err
    return [json.loads(line)["id"] for line in out.splitlines()]


def stored(root: Path, *runs: tuple[str, str], approval: str | None = None) -> str:
    """Write agent runs (id, agent) and, if named, a pending approval of `approval`'s tool
    straight into the store; the approval's id."""

    async def write() -> str:
        store = Store("sqlite:///.fim/state.db", root=root)
        try:
            for run_id, agent in runs:
                await store.put_run(run_id, "agent", agent, "ok", {"output": "o", "events": []})
            if approval is None:
                return ""
            return await store.create_approval("r1", "assistant", approval, {}, "why", None)
        finally:
            store.close()

    return asyncio.run(write())


# ------------------------------------------------------------ item 9: fim runs show


def test_runs_show_draws_the_run_as_run_v_does_and_json_keeps_the_events(root: Path) -> None:
    code, out, err = cli("run", "assistant", "What is 6*7?", "-p", str(root))
    assert code == 0, err
    (run_id,) = run_ids(root)
    code, out, err = cli("runs", "show", run_id, "-p", str(root))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"agent assistant · ok · run {run_id}"
    assert lines[1] == "input: What is 6*7?"
    assert re.fullmatch(r"· model call 1 · \d+\+\d+ tokens · [\d.]+ ms · tool_calls", lines[2])
    assert lines[3] == '→ calculator {"expression": "6*7"}'
    assert re.fullmatch(r"← calculator \(\d+ ms\) 42", lines[4])
    assert re.fullmatch(r"· model call 2 · \d+\+\d+ tokens · [\d.]+ ms", lines[5])
    assert lines[6] == "42, says the calculator"
    assert re.fullmatch(rf"ok · 2 model calls · \d+\+\d+ tokens · \d+ ms · run {run_id}", lines[7])
    assert "llm_call" not in out and "duration_ms" not in out  # no raw JSON
    code, out, _ = cli("runs", "show", run_id, "--json", "-p", str(root))
    assert [e["type"] for e in json.loads(out)["events"]][-1] == "run_finished"


def test_run_v_names_the_run_that_runs_show_finds(root: Path) -> None:
    code, _, err = cli("run", "assistant", "What is 6*7?", "-v", "-p", str(root))
    assert code == 0, err
    (run_id,) = run_ids(root)
    assert err.splitlines()[-1].endswith(f" ms · run {run_id}")


def test_runs_show_takes_a_unique_start_of_an_id_and_lists_an_ambiguous_one(root: Path) -> None:
    stored(root, ("abc111def000", "assistant"), ("abc222def000", "helper"))
    code, out, err = cli("runs", "show", "abc1", "-p", str(root))
    assert code == 0, err
    assert out.startswith("agent assistant · ok · run abc111def000\n")
    code, out, err = cli("runs", "show", "abc", "-p", str(root))
    assert code == 1 and not out
    assert err.startswith("error: run id 'abc' is ambiguous: it starts ")
    assert err.endswith(" (type more of the id)\n")
    assert "abc222def000 (agent helper, ok)" in err and "abc111def000 (agent assistant, ok)" in err
    code, _, err = cli("runs", "show", "abd", "-p", str(root))
    assert code == 1 and err.startswith("error: no run 'abd' in ")
    assert "`fim runs list` shows the stored runs" in err


def test_runs_show_last_is_the_newest_run_or_the_newest_of_an_agent(root: Path) -> None:
    for agent in ("assistant", "helper"):
        assert cli("run", agent, "What is 6*7?", "-p", str(root))[0] == 0
    code, out, err = cli("runs", "show", "last", "-p", str(root))
    assert code == 0 and out.startswith("agent helper · ok · run "), err
    code, out, err = cli("runs", "show", "last", "--agent", "assistant", "-p", str(root))
    assert code == 0 and out.startswith("agent assistant · ok · run "), err
    code, _, err = cli("runs", "show", "last", "--agent", "nobody", "-p", str(root))
    assert code == 1 and err.startswith("error: no runs of agent 'nobody' in sqlite:")


# ------------------------------------------------------------ item 12: guessed names


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("chat", "fim run AGENT, without a prompt"),
        ("dev", "fim serve, then open http://127.0.0.1:8000/"),
        ("web", "fim serve"),
        ("ui", "fim serve"),
        ("agents", "fim list agents"),
        ("trace", "fim runs show ID (or last)"),
        ("logs", "fim runs show ID (or last)"),
    ],
)
def test_a_command_other_tools_have_is_routed_to_fims(typed: str, said: str) -> None:
    from fim.cli import app

    result = runner.invoke(app, [typed, "x"], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"No such command '{typed}' (" in result.output and said in result.output
    assert "Did you mean" not in result.output  # `fim chat` was "Did you mean 'schema'?"


@pytest.mark.parametrize("option", ["--resume", "--continue", "--thread"])
def test_resume_options_of_other_tools_point_at_session(option: str) -> None:
    from fim.cli import app

    result = runner.invoke(app, ["run", "assistant", option], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"No such option: {option} (use --session NAME" in result.output


# ------------------------------------------------------------ item 14: the prompt


def test_a_dash_reads_the_prompt_from_stdin_without_its_last_newline(root: Path) -> None:
    for args in (["-"], []):
        code, out, err = cli(
            "run", "assistant", *args, "--json", "-p", str(root), input="from stdin\n"
        )
        assert code == 0, err
        started = json.loads(out.splitlines()[0])
        assert started["type"] == "run_started" and started["input"] == "from stdin", args


def test_a_prompt_where_the_agent_goes_gets_the_usage_with_a_real_agent(root: Path) -> None:
    code, _, err = cli("run", "Tip on 48?", "-p", str(root))
    assert code == 1
    assert err == (
        "error: unknown agent 'Tip on 48?' (usage: fim run AGENT \"PROMPT\", e.g. "
        'fim run assistant "Tip on 48?")\n'
    )


# ------------------------------------------------------------ item 13: completion


def complete(line: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What bash's TAB offers at the end of `line` (the protocol of `fim
    --install-completion`'s script)."""
    from fim.cli import app

    monkeypatch.chdir(cwd)
    words = line.split(" ")
    env = {"_FIM_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    result = runner.invoke(app, [], prog_name="fim", env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.split()


def test_tab_completes_names_and_kinds_without_compiling(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fim.build.compile

    def compiled(*args: object, **kwargs: object) -> None:
        raise AssertionError("a TAB compiled the project")

    monkeypatch.setattr(fim.build.compile, "compile_project", compiled)
    (root / "agents" / "broken.yaml").write_text("tools: [\n")  # offered all the same
    assert complete("fim run ", root, monkeypatch) == ["assistant", "broken", "helper"]
    assert complete("fim run he", root / "agents", monkeypatch) == ["helper"]
    assert complete("fim workflow run ", root, monkeypatch) == ["tip"]
    assert complete("fim show a", root, monkeypatch) == ["agent"]
    assert complete("fim show p", root, monkeypatch) == ["project"]
    assert complete("fim schema w", root, monkeypatch) == ["workflow"]


def test_tab_completes_run_ids_and_pending_approval_ids(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    approval = stored(root, ("abc111def000", "assistant"), ("fed000", "helper"), approval="x")
    offered = complete("fim runs show ", root, monkeypatch)
    assert offered[0] == "last" and sorted(offered[1:]) == ["abc111def000", "fed000"]
    assert complete("fim runs show ab", root, monkeypatch) == ["abc111def000"]
    assert complete("fim approvals approve ", root, monkeypatch) == [approval]
    assert complete("fim approvals deny ", root, monkeypatch) == [approval]
