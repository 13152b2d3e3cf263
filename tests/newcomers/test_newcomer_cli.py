"""A newcomer's first hour with the command line and the server: what they type, what they
should see. Each test is one finding of the newcomer review, stated as the behaviour fixed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project, WorkflowDecl
from fim.testing.server import ServerThread

runner = CliRunner()

SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: "done"
"""

WORKFLOW = """\
description: Evaluate an expression
inputs:
  expression: {type: string}
nodes:
  calculate: {type: tool, tool: calculator, args: {expression: "{{ inputs.expression }}"}}
outputs:
  result: "{{ nodes.calculate.output }}"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An offline project: `bot` calls the calculator behind a `confirm` hook, `calc`
    without one, and workflow `compute` runs the calculator."""
    root = tmp_path / "p"
    for folder in ("agents", "scripts", "workflows"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:scripts/s.yaml}\nstate: sqlite:///.fim/state.db\n"
    )
    (root / "scripts" / "s.yaml").write_text(SCRIPT)
    (root / "agents" / "bot.yaml").write_text(
        "description: asks before calculating\nmodel: general\ntools: [calculator]\n"
        "hooks:\n  - use: confirm\n    with: {all: true, timeout: 2, poll: 0.05}\n"
    )
    (root / "agents" / "calc.yaml").write_text(
        "description: calculates\nmodel: general\ntools: [calculator]\n"
    )
    (root / "workflows" / "compute.yaml").write_text(WORKFLOW)
    return root


def expiring_soon(root: Path, seconds: float) -> None:
    """`bot`'s approvals expire after `seconds`: a test of expiry waits that long for the
    store to expire one, not the 2 s the other tests leave a mocked answer to arrive."""
    bot = root / "agents" / "bot.yaml"
    bot.write_text(bot.read_text().replace("timeout: 2,", f"timeout: {seconds},"))


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def approvals(root: Path) -> list[dict[str, object]]:
    code, out, _ = cli("approvals", "list", "--all", "--json", "-p", str(root))
    assert code == 0
    return [json.loads(line) for line in out.splitlines()]


# ------------------------------------------------------------------ help


def test_help_shows_no_type_for_on_off_flags() -> None:
    """`--verbose -v <bool>` read as if the flag took a value; options with values keep
    their type."""
    _, out, _ = cli("run", "--help")
    verbose = next(line for line in out.splitlines() if "--verbose" in line)
    model = next(line for line in out.splitlines() if "--model" in line)
    assert "<bool>" not in out and "<bool>" not in verbose
    assert "<str>" in model


# ------------------------------------------------------------------ confirm in `fim run`


def test_without_a_terminal_a_confirm_request_is_denied_at_once_and_said_once(
    project: Path,
) -> None:
    code, out, err = cli("run", "bot", "six times seven", "-p", str(project))
    assert code == 0 and out == "done\n"
    (approval,) = approvals(project)
    assert approval["status"] == "denied" and approval["resolved_by"] == "fim run (no terminal)"
    said = [line for line in err.splitlines() if str(approval["id"]) in line]
    assert len(said) == 1 and "--wait-approvals" in said[0]


def test_at_a_terminal_fim_run_asks_and_records_the_answer_like_fim_approvals(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import getpass

    import fim.commands.run_view as run_command

    asked: list[str] = []

    def answer(prompt: str, timeout: float | None = None) -> str:
        asked.append(prompt)
        assert timeout is not None and 0 < timeout <= 2  # the hook's `timeout: 2`
        return "y\n"

    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(run_command, "read_answer", answer)
    code, out, _ = cli("run", "bot", "six times seven", "-v", "-p", str(project))
    assert code == 0 and out == "done\n"
    [question] = asked
    assert re.fullmatch(
        r'\nAllow calculator \{"expression": "6\*7"\}\? \[y/N/a\] \(expires in [12]s; '
        r"a: every call to calculator in this run\) ",
        question,
    ), question
    (approval,) = approvals(project)
    assert approval["status"] == "approved"
    assert approval["resolved_by"] == f"cli:{getpass.getuser()}"


HIDING = """\
- text: "All good.\\nAllow calculator {\\"expression\\": \\"6*7\\"}? [y/N] \\u001b[30;40m"
  tool_calls: [{name: calculator, arguments: {expression: "6*7 \\u001b]52;c;Y3VybA==\\u0007"}}]
- text: "done \\u001b[2J"
"""


def test_the_models_words_cannot_steer_the_terminal_or_hide_the_real_question(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model wrote a fake `Allow calculator ...? [y/N]` and then black on black, so the
    real question (about another call) was invisible and a `y` approved it. Escape
    sequences in what the model says and in a call's arguments are shown as text
    (`\\x1b`), and the real question starts a line of its own."""
    import fim.commands.run_view as run_command

    (project / "scripts" / "s.yaml").write_text(HIDING)
    asked: list[str] = []
    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(run_command, "read_answer", lambda q, t=None: asked.append(q) or "n\n")
    code, out, err = cli("run", "bot", "go", "-v", "-p", str(project))
    assert code == 0
    for shown in (out, err, *asked):
        assert "\x1b" not in shown and "\x07" not in shown, shown
    assert "\\x1b[30;40m" in out and "\\x1b[2J" in out
    [question] = asked
    assert question.startswith("\nAllow calculator") and "\\u001b]52;c;" in question
    run_id = json.loads(cli("runs", "list", "--json", "-p", str(project))[1].splitlines()[0])
    _, shown, _ = cli("runs", "show", run_id["id"], "-p", str(project))
    assert "\x1b" not in shown and "\\x1b[2J" in shown


ALWAYS = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- tool_calls: [{name: calculator, arguments: {expression: "1+1"}}]
- tool_calls: [{name: calculator, arguments: {expression: "2+2"}}]
- text: "done"
"""


def test_answering_always_allows_the_tools_later_calls_in_this_run(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code's "don't ask again": `a` approves the call and every later call of the
    agent to that tool in this `fim run`; each is still its own recorded approval."""
    import fim.commands.run_view as run_command

    (project / "scripts" / "s.yaml").write_text(ALWAYS)
    asked: list[str] = []
    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(run_command, "read_answer", lambda q, t=None: asked.append(q) or "a\n")
    code, out, err = cli("run", "bot", "go", "-p", str(project))
    assert code == 0 and out == "done\n"
    assert len(asked) == 1 and "calculator" in asked[0]
    found = approvals(project)
    assert [a["status"] for a in found] == ["approved"] * 3
    assert {a["data"]["note"] for a in found} == {"always, at the terminal"}  # type: ignore[index]
    assert err.count("you answered `a` for it") == 2


def test_at_a_terminal_anything_but_yes_denies(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fim.commands.run_view as run_command

    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(run_command, "read_answer", lambda prompt, timeout=None: "\n")
    code, _, _ = cli("run", "bot", "six times seven", "-p", str(project))
    (approval,) = approvals(project)
    assert code == 0 and approval["status"] == "denied"


def test_the_question_says_how_long_is_left_in_minutes_and_seconds() -> None:
    from fim.commands.run_view import expires_in

    assert expires_in(300) == "5m"
    assert expires_in(299.2) == "5m"  # asked at once: not "4m 59s"
    assert expires_in(270) == "4m 30s"
    assert expires_in(45) == "45s"
    assert expires_in(0.2) == "1s"


def test_an_approval_that_expires_at_the_prompt_stops_the_wait_and_says_so(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompt waited for a key long after the approval had expired, and a `y` typed
    then was silently ignored. Now the wait ends with the approval (`read_answer` gets the
    time left and returns `expired`) and says the call was not run; no decision is
    recorded in its name."""
    import fim.commands.run_view as run_command

    expiring_soon(project, 1.5)  # time to reach the prompt on a loaded machine (0.3 was not)
    waits: list[float | None] = []
    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(
        run_command, "read_answer", lambda q, timeout=None: waits.append(timeout) or "expired"
    )
    code, out, err = cli("run", "bot", "six times seven", "-p", str(project))
    assert code == 0 and out == "done\n"
    (approval,) = approvals(project)
    assert approval["status"] == "expired" and approval["resolved_by"] == "timeout"
    assert f"approval {approval['id']} expired; the call to calculator was not run" in err
    [wait] = waits
    assert wait is not None and 0 < wait <= 1.5  # the hook's `timeout: 1.5`


def test_an_approval_that_expired_before_its_question_is_not_asked_about(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question's clock (only `fim run`'s: the store keeps its own) is past the
    deadline: nobody is asked a question that can no longer be answered."""
    import types

    import fim.commands.run_view as run_command

    expiring_soon(project, 0.3)
    asked: list[str] = []
    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(run_command, "time", types.SimpleNamespace(time=lambda: float("inf")))
    monkeypatch.setattr(run_command, "read_answer", lambda q, t=None: asked.append(q) or "y\n")
    code, out, err = cli("run", "bot", "six times seven", "-p", str(project))
    assert code == 0 and out == "done\n" and asked == []
    (approval,) = approvals(project)
    assert approval["status"] == "expired"
    assert f"approval {approval['id']} expired; the call to calculator was not run" in err


def test_an_answer_that_comes_after_the_approval_expired_is_told_it_was_too_late(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where stdin cannot be waited on with a deadline, the `y` can arrive after the
    approval expired: it is not recorded, and the human is told so."""
    import sqlite3

    import fim.commands.run_view as run_command

    def late(prompt: str, timeout: float | None = None) -> str:
        db = sqlite3.connect(project / ".fim" / "state.db")
        with db:  # time passes...
            db.execute("UPDATE fim_approvals SET expires_at = 1 WHERE status = 'pending'")
        db.close()
        return "y\n"

    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(run_command, "read_answer", late)
    code, out, err = cli("run", "bot", "six times seven", "-p", str(project))
    assert code == 0 and out == "done\n"
    (approval,) = approvals(project)
    assert approval["status"] == "expired"
    assert (
        f"too late: approval {approval['id']} had expired before your answer; the call to "
        "calculator was not run"
    ) in err


def test_an_answer_another_shell_of_the_same_user_beat_is_told_it_was_not_recorded(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another shell of the same user denies the approval while the prompt waits: the
    `a` typed here is not recorded and the human is told who decided (the same user name
    no longer passes for "my answer won": the store says which decision changed it)."""
    import sqlite3

    import fim.commands.run_view as run_command
    from fim.commands.approvals import cli_user

    asked: list[str] = []

    def beaten(prompt: str, timeout: float | None = None) -> str:
        asked.append(prompt)
        if len(asked) == 1:
            db = sqlite3.connect(project / ".fim" / "state.db")
            with db:  # `fim approvals deny ID` in a second shell of the same user
                db.execute(
                    "UPDATE fim_approvals SET status = 'denied', resolved_by = ?"
                    " WHERE status = 'pending'",
                    (cli_user(),),
                )
            db.close()
        return "a\n"

    monkeypatch.setattr(run_command, "interactive", lambda: True)
    monkeypatch.setattr(run_command, "read_answer", beaten)
    code, out, err = cli("run", "bot", "six times seven", "-p", str(project))
    assert code == 0 and out == "done\n"  # the call was denied; the run went on
    first = approvals(project)[0]
    assert first["status"] == "denied"
    assert f"too late: approval {first['id']} was already denied by" in err
    assert "your answer was not recorded" in err


def test_read_answer_returns_expired_when_no_line_comes_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real seam, on a pipe: nothing typed within the time left is `expired`; a line
    typed is the answer; a stream that cannot be waited on is read without a deadline."""
    import io
    import os

    from fim.commands.run_view import EXPIRED, read_answer

    monkeypatch.setattr("sys.stderr", io.StringIO())
    readable, writable = os.pipe()
    with os.fdopen(readable) as stdin, os.fdopen(writable, "w") as typing:
        monkeypatch.setattr("sys.stdin", stdin)
        assert read_answer("Allow? ", 0) == EXPIRED
        typing.write("y\n")
        typing.flush()
        assert read_answer("Allow? ", 0) == "y\n"
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))  # no file descriptor
    assert read_answer("Allow? ", 0) == "n\n"


def test_a_fim_run_killed_mid_run_is_listed_as_interrupted(project: Path) -> None:
    """A `fim run` is recorded as it starts: killed while it waited for an approval, it is
    in `fim runs list` as interrupted, and `fim runs show` knows the run the approval
    names (it was absent: only finished runs were stored)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    (project / "agents" / "waits.yaml").write_text(
        "description: waits\nmodel: general\ntools: [calculator]\n"
        "hooks:\n  - use: confirm\n    with: {all: true, timeout: 600, poll: 0.05}\n"
    )
    running = subprocess.Popen(
        [sys.executable, "-m", "fim.cli", "run", "waits", "go", "--wait-approvals"],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(1200):  # until it waits for a human (60 s at most)
            found = approvals(project)
            if found or running.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        os.kill(running.pid, signal.SIGKILL)
        running.wait()
    (approval,) = found
    code, out, _ = cli("runs", "list", "-p", str(project))
    assert code == 0 and "interrupted" in out
    code, out, _ = cli("runs", "show", str(approval["run_id"]), "-p", str(project))
    assert code == 0 and "agent waits · interrupted (its process ended)" in out


# ------------------------------------------------------------------ fim run: names


def test_an_unknown_agent_gets_a_did_you_mean(project: Path) -> None:
    code, _, err = cli("run", "bott", "hi", "-p", str(project))
    assert code == 1
    assert "error: unknown agent 'bott' (did you mean 'bot'?)" in err


def test_a_model_flag_is_checked_like_validate_checks_it(project: Path) -> None:
    code, _, err = cli("run", "calc", "hi", "-m", "opneai/gpt-4o", "-p", str(project))
    assert code == 1
    assert "unknown model provider 'opneai'" in err and "did you mean 'openai'?" in err
    code, _, err = cli("run", "calc", "hi", "-m", "gpt-4o", "-p", str(project))
    assert code == 1 and "did you mean 'openai/gpt-4o'?" in err
    code, _, err = cli("run", "calc", "hi", "-m", "generl", "-p", str(project))
    assert code == 1 and "did you mean 'general'?" in err


# ------------------------------------------------------------------ fim runs


def test_a_fim_run_run_is_in_the_state_store(project: Path) -> None:
    code, out, _ = cli("run", "calc", "six times seven", "--json", "-p", str(project))
    run_id = json.loads(out.splitlines()[0])["run_id"]
    assert code == 0
    code, shown, _ = cli("runs", "show", run_id, "-p", str(project))
    assert code == 0
    lines = shown.splitlines()
    assert lines[:2] == [f"agent calc · ok · run {run_id}", "input: six times seven"]
    assert "done" in lines and any(line.startswith("← calculator (") for line in lines)


def test_runs_show_of_a_workflow_run_shows_its_nodes(project: Path) -> None:
    code, out, _ = cli(
        "workflow", "run", "compute", "-i", "expression=2+3", "--json", "-p", str(project)
    )
    run_id = json.loads(out)["run_id"]
    assert code == 0
    code, shown, _ = cli("runs", "show", run_id, "-p", str(project))
    assert code == 0
    assert f"compute run {run_id}: ok" in shown
    assert re.search(r"calculate\s*│\s*tool\s*│\s*ok", shown)
    assert '"result": "5"' in shown


def test_workflow_inputs_given_as_arguments_point_to_input(project: Path) -> None:
    code, _, err = cli("workflow", "run", "compute", "expression=6*7", "-p", str(project))
    assert code == 1
    assert err.strip() == (
        "error: unexpected argument 'expression=6*7' (give inputs as options: "
        "fim workflow run compute --input 'expression=6*7')"
    )


# ------------------------------------------------------------------ project commands


def test_schema_write_prints_modelines_relative_to_each_files_folder(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    code, out, _ = cli("schema", "--write", ".schemas")
    assert code == 0
    assert "agents/*.yaml      # yaml-language-server: $schema=../.schemas/agent.schema.json" in out
    assert "fim.yaml           # yaml-language-server: $schema=.schemas/project.schema.json" in out
    settings = json.loads(out[out.index("{") :])
    assert settings["yaml.schemas"][".schemas/agent.schema.json"] == [
        "agents/*.yaml",
        "agents/*.yml",
    ]
    # what `fim init` maps: a scripted model's replies (evals/x.script.yaml) are no suite
    assert "!evals/*.*.yaml" in settings["yaml.schemas"][".schemas/eval.schema.json"]


def test_init_quotes_the_directory_in_the_next_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli("init", "my agents")
    assert code == 0
    assert out.splitlines()[-1] == "next: cd 'my agents' && fim validate && fim list"


# ------------------------------------------------------------------ fim serve


def keyless_snapshot(root: Path) -> Snapshot:
    project = Project(name="k", state=f"sqlite:///{root / 'state.db'}")
    hosted = ModelSettings(model="openai/gpt-4o-mini")
    workflow = WorkflowDecl.model_validate(
        {
            "name": "compute",
            "inputs": {"expression": {"type": "string"}, "note": {"default": "-"}},
            "nodes": {"c": {"type": "tool", "tool": "calculator", "args": {"expression": "1"}}},
        }
    )
    return Snapshot(
        root=root,
        project=project,
        agents={
            "support": AgentDecl(name="support", model=hosted),
            "triage": AgentDecl(name="triage", model=hosted),
        },
        workflows={"compute": workflow},
    )


def test_serve_warns_at_start_which_agents_lack_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fim.commands.serve import keyless_agents

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert keyless_agents(keyless_snapshot(tmp_path)) == [
        "warning: agents support, triage need OPENAI_API_KEY (unset); their runs fail until "
        "it is set (or FIM_MODEL=ollama/qwen2.5 for a local model)"
    ]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "x" * 40)
    assert keyless_agents(keyless_snapshot(tmp_path)) == []


def test_a_missing_model_key_is_a_503_clients_do_not_retry_and_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fim.server.app import create_app

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    chat = {"model": "support", "messages": [{"role": "user", "content": "hi"}]}
    with ServerThread(create_app(SnapshotHolder(keyless_snapshot(tmp_path)))) as srv:
        openai = httpx.post(f"{srv.url}/v1/chat/completions", json=chat)
        native = httpx.post(f"{srv.url}/v1/agents/support/runs", json={"input": "hi"})
        runs = httpx.get(f"{srv.url}/v1/runs").json()["runs"]
    for reply in (openai, native):
        assert reply.status_code == 503 and reply.headers["x-should-retry"] == "false"
        error = reply.json()["error"]
        assert error["message"].startswith(  # then the hint, which SDKs print
            "agent 'support' cannot run on this server: missing API key for "
            "openai/gpt-4o-mini; nothing ran ("
        )
        assert "OPENAI_API_KEY" in error["hint"]
    assert runs == []


def test_request_bodies_name_the_unknown_field(tmp_path: Path) -> None:
    from fim.server.app import create_app

    with ServerThread(create_app(SnapshotHolder(keyless_snapshot(tmp_path)))) as srv:
        flat = httpx.post(f"{srv.url}/v1/workflows/compute/runs", json={"expression": "6*7"})
        listed = httpx.get(f"{srv.url}/v1/workflows").json()["workflows"]
    assert _body_error(tmp_path, {"inptu": "hi"}) == (
        "unknown field 'inptu' (did you mean 'input'?): send 'input' (a string) or "
        "'messages' (a list of chat messages)",
        "inptu",
    )
    assert flat.status_code == 400
    error = flat.json()["error"]
    assert error["param"] == "expression"
    assert error["message"] == (
        "unknown field 'expression': a workflow's inputs go under 'inputs' "
        '({"inputs": {"expression": ...}})'
    )
    inputs = listed[0]["inputs"]
    assert (inputs["expression"]["required"], inputs["note"]["required"]) == (True, False)


def _body_error(root: Path, body: dict[str, object]) -> tuple[str, str | None]:
    """The 400 a run body gets, from an agent whose model needs no key."""
    from fim.server.app import create_app

    project = Project(name="s", state=f"sqlite:///{root / 'scripted.db'}")
    agent = AgentDecl(name="s", model=ModelSettings(model="scripted:none.yaml"))
    snapshot = Snapshot(root=root, project=project, agents={"s": agent})
    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        reply = httpx.post(f"{srv.url}/v1/agents/s/runs", json=body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert "Value error" not in error["message"]
    return error["message"], error["param"]


def test_metrics_without_prometheus_client_is_a_501_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fim.observe.metrics as metrics
    from fim.server.app import create_app

    monkeypatch.setattr(metrics, "METRICS", metrics._Nothing())
    with ServerThread(create_app(SnapshotHolder(keyless_snapshot(tmp_path)))) as srv:
        reply = httpx.get(f"{srv.url}/metrics")
    assert reply.status_code == 501
    assert "pip install -e '.[otel]'" in reply.json()["error"]["message"]


# ------------------------------------------------------------------ model errors


async def test_an_unreachable_endpoint_gets_a_network_hint_not_rate_limiting() -> None:
    from fim.errors import RunError
    from fim.llm.base import UNREACHABLE, Transient, with_retries

    async def attempt() -> str:
        raise Transient(f"{UNREACHABLE} https://api.openai.com/v1", "ClientConnectorDNSError")

    async def no_sleep(seconds: float) -> None:
        return None

    settings = ModelSettings(model="openai/gpt-4o-mini", max_retries=1)
    with pytest.raises(RunError) as caught:
        await with_retries(settings, attempt, sleep=no_sleep)
    assert "rate-limiting" not in (caught.value.hint or "")
    assert "DNS" in (caught.value.hint or "") and "HTTPS_PROXY" in (caught.value.hint or "")
