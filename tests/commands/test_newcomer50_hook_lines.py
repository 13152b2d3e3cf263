"""`fim run` says a failing hook's message once: a refused session as its `error:` line only
(no `warning:` line with the same text, no third copy in `-v`'s hook line), a tool call's
failing hook as its `warning:` line, `-v`'s hook line then showing only the decision
(newcomer-50 #9). `-v` still shows the blocked call's observation, which is what the model
read."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: "done"
"""

MISSING = "fim-newcomer50-no-uv run x.py"
MESSAGE = "fim-newcomer50-no-uv: not found"


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = CliRunner().invoke(app, ["run", "assistant", "6*7", *args, "-p", str(root)])
    return result.exit_code, result.stdout, result.stderr


def project(tmp_path: Path, event: str) -> Path:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:s.yaml}\nstate: sqlite:///.fim/state.db\n"
    )
    (root / "s.yaml").write_text(SCRIPT)
    (root / "agents" / "assistant.yaml").write_text(
        "description: a\nmodel: general\ntools: [calculator]\n"
        f'hooks:\n  - {{event: {event}, command: "{MISSING}"}}\n'
    )
    return root


@pytest.mark.parametrize("verbose", [(), ("-v",)], ids=["plain", "verbose"])
def test_a_refused_session_is_said_once_as_the_runs_error(
    tmp_path: Path, verbose: tuple[str, ...]
) -> None:
    code, out, err = cli(project(tmp_path, "SessionStart"), *verbose)
    assert code == 1 and out == ""
    assert err.count(MESSAGE) == 1, err
    (error,) = [line for line in err.splitlines() if MESSAGE in line]
    assert error.startswith("error: SessionStart hook 'command: fim-newcomer50-no-uv")
    assert "the session was refused because hooks fail closed" in error
    assert "warning:" not in err
    if verbose:
        assert f"⚑ SessionStart command: {MISSING} block\n" in err


def test_a_failing_tool_hook_under_verbose_is_one_warning_and_a_bare_decision(
    tmp_path: Path,
) -> None:
    code, out, err = cli(project(tmp_path, "PreToolUse"), "-v")
    assert (code, out) == (0, "done\n")  # the call was blocked, the model answered
    said = [line for line in err.splitlines() if MESSAGE in line and line[0] != "←"]
    (warning,) = said  # `←` is the observation the model read, which quotes it
    assert warning.startswith("warning: PreToolUse on calculator: ")
    assert "the call was blocked because hooks fail closed" in warning
    assert f"⚑ PreToolUse command: {MISSING} block\n" in err
