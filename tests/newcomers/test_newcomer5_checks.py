"""Newcomer review 5, findings 4, 5, 7 and 9: what `fim validate`, a command hook and the
server say when a newcomer's first project goes wrong, stated as the behaviour fixed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.errors import ConfigError
from fim.events import Notice
from fim.hooks.command import CommandHook
from fim.llm.script import load_script
from fim.testing.server import ServerThread
from fim.types import HookContext

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def project(root: Path, script: str, fim_yaml: str = "") -> Path:
    """A project whose one agent runs on `scripts/s.yaml` (the plain list form `fim init`
    writes), with `fim_yaml` appended to its fim.yaml."""
    for folder in ("agents", "scripts"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:scripts/s.yaml}\n"
        "state: sqlite:///.fim/state.db\n" + fim_yaml
    )
    (root / "scripts" / "s.yaml").write_text(script)
    (root / "agents" / "dev.yaml").write_text("description: d\nmodel: general\n")
    return root


# ---------------------------------------------------------------- 4: plain-form scripts


TYPOS = """\
- tool_cals: [{name: calculator, arguments: {expression: "6*7"}}]
- tool_calls: [{nme: calculator}]
- text: done
"""


def test_validate_reports_every_problem_of_a_plain_list_script(tmp_path: Path) -> None:
    """`fim init` writes the list form; a typo in it was `ok` to `fim validate` and failed
    only when the agent ran."""
    root = project(tmp_path, TYPOS)
    code, out, _ = cli("validate", "--project", str(root))
    assert code == 1
    assert "scripts/s.yaml:1:3: unknown step key 'tool_cals' (did you mean 'tool_calls'?)" in out
    assert (
        "scripts/s.yaml:2:16: a tool call needs a `name` (the call has 'nme': did you mean "
        "'name'?)" in out
    )


def test_validate_checks_the_steps_mapping_form_too(tmp_path: Path) -> None:
    root = project(tmp_path, "steps:\n  - {text: ok, tool_cal: {name: x}}\n")
    code, out, _ = cli("validate", "--project", str(root))
    assert code == 1
    assert "scripts/s.yaml:2:16: unknown step key 'tool_cal' (did you mean 'tool_call'?)" in out


def test_the_run_reports_what_validate_reports(tmp_path: Path) -> None:
    """One reader for both: the run's problems are validate's, at the same lines, all at
    once (the run used to stop at the first)."""
    root = project(tmp_path, TYPOS)
    with pytest.raises(ConfigError) as caught:
        load_script(root / "scripts" / "s.yaml")
    said = [(p.line, p.column, p.message) for p in caught.value.problems]
    assert said == [
        (1, 3, "unknown step key 'tool_cals'"),
        (2, 16, "a tool call needs a `name`"),
    ]


def test_a_valid_plain_script_still_validates_and_runs(tmp_path: Path) -> None:
    script = '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: done\n'
    root = project(tmp_path, script)
    code, out, _ = cli("validate", "--project", str(root))
    assert code == 0 and out.startswith("ok: 1 agent")
    steps = load_script(root / "scripts" / "s.yaml")
    assert isinstance(steps, list)
    assert [c.arguments for c in steps[0].message.tool_calls] == [{"expression": "6*7"}]
    assert steps[1].message.content == "done"


# ---------------------------------------------------------------- 5: command hooks


def call(hook: CommandHook) -> tuple[Any, list[Notice]]:
    notices: list[Notice] = []
    hook._notify = notices.append
    context = HookContext(point="PreToolUse", agent="a", run_id="r", tool_name="shell")
    return asyncio.run(hook(context)), notices


NEEDS_TOKEN = (
    '[ -n "$NEWCOMER5_TOKEN" ] || { echo "error: NEWCOMER5_TOKEN is not set" >&2; exit 1; }'
)


def test_a_hook_failing_on_a_variable_fim_did_not_pass_names_the_fix(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The variable is set in the user's shell; the hook's environment is allow-listed.
    The operator's log says which variable and how to pass it; the block message, which
    the model and an API caller read, names the mechanism only (which secrets fim holds is
    not theirs to learn, attack-34 #7)."""
    monkeypatch.setenv("NEWCOMER5_TOKEN", "tok-4f9a8b7c6d5e")
    hook = CommandHook(command=NEEDS_TOKEN, event="PreToolUse")
    with caplog.at_level(logging.WARNING, logger="fim.hooks"):
        result, _ = call(hook)
    assert not result.allow
    assert "NEWCOMER5_TOKEN is set for fim" not in result.error
    assert "`env: [NAME]` on the hook" in result.error
    assert [r.getMessage() for r in caplog.records if r.name == "fim.hooks"] == [
        f"hook '{hook.name}' failed; NEWCOMER5_TOKEN is set for fim but not "
        "passed to hooks, which get an allow-listed environment: add `env: [NEWCOMER5_TOKEN]` "
        "to the hook"
    ]
    passed, _ = call(CommandHook(command=NEEDS_TOKEN, event="PreToolUse", env=["NEWCOMER5_TOKEN"]))
    assert passed.allow


def test_any_failing_hook_names_the_environment_allow_list() -> None:
    result, _ = call(
        CommandHook(command="echo 'gh: not logged in' >&2; exit 1", event="PreToolUse")
    )
    assert not result.allow
    assert result.error.endswith(
        "hooks fail closed (a hook gets an allow-listed environment (PATH, HOME, LANG, ...): "
        "a variable it needs from fim's is passed with `env: [NAME]` on the hook)"
    )


def test_a_hooks_stderr_on_success_is_an_operators_log_line_not_an_event(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`fim run -v` prints it (fim.hooks at info); no event carries it to an API caller or
    the stored trace (a hook's own debug output may hold a secret fim does not know)."""
    monkeypatch.setenv("NEWCOMER5_TOKEN", "tok-4f9a8b7c6d5e")
    hook = CommandHook(
        command='echo "using $NEWCOMER5_TOKEN" >&2', event="PreToolUse", env=["NEWCOMER5_TOKEN"]
    )
    with caplog.at_level(logging.INFO, logger="fim.hooks"):
        result, notices = call(hook)
        quiet, none = call(CommandHook(command="true", event="PreToolUse"))
    assert result.allow and notices == []
    said = [r.getMessage() for r in caplog.records if r.name == "fim.hooks"]
    assert said == [f"hook '{hook.name}' stderr: using ***"]
    assert quiet.allow and none == []


# ---------------------------------------------------------------- 7: MCP commands


MCP = "mcp_servers:\n  notes:\n    command: pythn\n    args: [mcp_server.py]\n"


def test_validate_warns_of_an_mcp_command_that_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run refused it (`fim.run.preflight`); `fim validate --strict`, the CI gate,
    passed it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text("#!/bin/sh\n")
    (bin_dir / "python").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    root = project(tmp_path / "p", "- text: hi\n", MCP)
    said = (
        "fim.yaml:6:5: warning: MCP server 'notes': command 'pythn' not found "
        "(did you mean 'python'? or install it, or fix mcp_servers in fim.yaml)"
    )
    code, out, err = cli("validate", "--project", str(root))
    assert code == 0 and out.startswith("ok:") and said in err
    code, out, _ = cli("validate", "--strict", "--project", str(root))
    assert code == 1 and said.replace(" warning:", "") in out
    (root / "fim.yaml").write_text((root / "fim.yaml").read_text().replace("pythn", "python"))
    assert cli("validate", "--strict", "--project", str(root))[0] == 0


# ---------------------------------------------------------------- 9: errors over HTTP


def keyless(root: Path) -> Snapshot:
    return Snapshot(
        root=root,
        project=Project(name="k", state=f"sqlite:///{root / 'state.db'}"),
        agents={"support": AgentDecl(name="support", model=ModelSettings(model="openai/x"))},
    )


def test_the_openai_sdk_shows_the_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDKs print only `message`: the fix fim knows must be in it (`hint` stays)."""
    import openai

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with ServerThread(create_app(keyless(tmp_path))) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="k", max_retries=0)
        hi: Any = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.APIStatusError) as missing_key:
            client.chat.completions.create(model="support", messages=hi)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "x" * 40)  # refused before any call
        with pytest.raises(openai.BadRequestError) as bad_body:
            client.chat.completions.create(
                model="support", messages=hi, functions=[{"name": "f", "parameters": {}}]
            )
        functions = {"model": "support", "messages": hi, "functions": [{"name": "f"}]}
        raw = httpx.post(f"{srv.url}/v1/chat/completions", json=functions).json()
    assert missing_key.value.status_code == 503
    assert "missing API key for openai/x; nothing ran (set OPENAI_API_KEY" in str(missing_key.value)
    assert "is not supported (send 'tools' and 'tool_choice')" in str(bad_body.value)
    assert raw["error"]["hint"] and raw["error"]["hint"] in raw["error"]["message"]


def create_app(snapshot: Snapshot) -> Any:
    # deferred: the server's modules are loaded only by the tests that serve
    from fim.server.app import create_app as build

    return build(SnapshotHolder(snapshot))


def test_a_hint_is_not_repeated_when_the_message_has_it() -> None:
    from fim.server.replies import with_hint

    assert with_hint("no key", "set X") == "no key (set X)"
    assert with_hint("no key (set X)", "set X") == "no key (set X)"
    assert with_hint("no key", None) == "no key"


def test_an_empty_tool_calls_list_is_named_as_such(tmp_path: Path) -> None:
    """`tool_calls: []` is not a call missing its name: the problem says what it is."""
    from fim.config.script_files import read_script

    _, problems = read_script("- tool_calls: []\n- text: done\n", "s.yaml")
    assert [p.message for p in problems] == ["`tool_calls` is empty"]
