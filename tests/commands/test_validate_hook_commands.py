"""`fim validate` warns about a command hook whose program is not installed here (a hook
copied from a Claude Code project runs `uv run .claude/hooks/x.py`): the hook would fail on
every call, and a failing hook blocks the call it guards, so every call it matches would be
refused at run time with nothing said before (interop-cc)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.inprocess_cli import run_fim


def project(root: Path, command: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: h\nstate: "sqlite:///.fim/state.db"\n')
    (root / "a.yaml").write_text("- text: hi\n")
    (root / "agents" / "dev.yaml").write_text(
        "model: scripted:a.yaml\ntools: [calculator]\n"
        f"hooks: [{{event: PreToolUse, matcher: calculator, command: '{command}'}}]\n"
    )
    return root


def test_a_hook_program_not_installed_is_a_warning_strict_fails(tmp_path: Path) -> None:
    root = project(tmp_path, "nosuchprog-fim run .claude/hooks/guard.py")
    ran = run_fim("validate", "--project", str(root))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (
        "agents/dev.yaml:3:59: warning: agent 'dev': hook command 'nosuchprog-fim' is not "
        "installed here" in ran.stderr
    )
    assert run_fim("validate", "--strict", "--project", str(root)).returncode == 1


def test_an_installed_program_or_a_shell_expression_is_left_to_run(tmp_path: Path) -> None:
    for command in (f"{Path(sys.executable).name} -c pass", "$HOME/bin/x", "FOO=1 env"):
        root = project(tmp_path / str(abs(hash(command))), command)
        ran = run_fim("validate", "--project", str(root))
        assert ran.returncode == 0 and "is not installed here" not in ran.stderr, command
