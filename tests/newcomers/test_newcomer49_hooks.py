"""Newcomer 49's item 7: a hook script whose `#!` line cannot start it (Windows line
endings) is a `fim validate` problem at the hook's command, with the fix, and one whose
interpreter is not installed here a warning; a hook the shell could not find or start
(exit 126/127) is told to check its `#!` line and the program, not to end with `|| true`."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def project(root: Path, scripts: dict[str, bytes], commands: list[str]) -> Path:
    """Agent `assistant` (a calculator call, then `done`) with a PreToolUse command hook
    per command, and the hook scripts, executable."""
    hooks = "".join(f"  - {{event: PreToolUse, command: '{c}'}}\n" for c in commands)
    files = {
        "fim.yaml": b"name: p\nstate: sqlite:///.fim/state.db\n",
        "s.yaml": b'- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n'
        b"- text: done\n",
        "agents/assistant.yaml": (
            f"description: a\nmodel: scripted:s.yaml\ntools: [calculator]\nhooks:\n{hooks}"
        ).encode(),
        **scripts,
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)
        if name.startswith("hooks/"):
            (root / name).chmod(0o755)
    return root


def test_validate_refuses_a_hook_script_with_windows_line_endings(tmp_path: Path) -> None:
    scripts = {
        "hooks/crlf.sh": b"#!/bin/sh\r\nexit 0\r\n",  # git autocrlf, a Windows editor
        "hooks/fine.sh": b"#!/bin/sh\nexit 0\n",
        "hooks/plain.sh": b"exit 0\n",  # no #!: the shell runs it
    }
    root = project(tmp_path, scripts, [f"./{name}" for name in scripts])
    code, out, _ = cli("validate", "-p", str(root))
    assert code == 1
    assert out.splitlines() == [
        "agents/assistant.yaml:5:34: hook script './hooks/crlf.sh' has Windows line endings: "
        "its #! line ends in \\r, so every call fails with 'not found' (exit 127) "
        "(sed -i 's/\\r$//' ./hooks/crlf.sh; keep it so in git with a .gitattributes line "
        "`*.sh text eol=lf`)",
        "1 problem in 1 file",
    ]


def test_validate_warns_of_an_interpreter_not_installed_here(tmp_path: Path) -> None:
    """A warning, as for a hook program not installed: the machine that validates (CI) is
    often not the one that serves; `--strict` fails on it."""
    scripts = {
        "hooks/gone.sh": b"#!/usr/bin/env fim-no-such-interpreter-49 -u\nexit 0\n",
        "hooks/absent.py": b"#!/opt/fim-no-such-dir/python3\nprint()\n",
        "hooks/fine.sh": b"#!/bin/sh\nexit 0\n",
    }
    root = project(tmp_path, scripts, [f"./{name}" for name in scripts])
    code, out, err = cli("validate", "-p", str(root))
    assert code == 0 and out.startswith("ok: ")
    assert err.splitlines() == [
        "agents/assistant.yaml:5:34: warning: agent 'assistant': hook script './hooks/gone.sh' "
        "runs 'fim-no-such-interpreter-49' (its #! line), which is not on PATH here: the hook "
        "fails, and a failing hook blocks every call it matches (hooks fail closed) (install "
        "fim-no-such-interpreter-49, or name an interpreter that is installed in the #! line)",
        "agents/assistant.yaml:6:34: warning: agent 'assistant': hook script "
        "'./hooks/absent.py' names interpreter '/opt/fim-no-such-dir/python3' in its #! line, "
        "which does not exist here: the hook fails, and a failing hook blocks every call it "
        "matches (hooks fail closed) (fix the #! line, e.g. #!/usr/bin/env python3, or install "
        "the interpreter)",
    ]
    assert cli("validate", "--strict", "-p", str(root))[0] == 1


def test_a_hook_the_shell_cannot_find_is_told_to_check_its_program(tmp_path: Path) -> None:
    scripts = {"hooks/check.sh": b'#!/bin/sh\nfim-no-such-program-49 "$@"\n'}
    root = project(tmp_path, scripts, ["./hooks/check.sh"])
    code, out, err = cli("run", "assistant", "hi", "-p", str(root))
    assert code == 0 and out == "done\n"
    (warning,) = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "hook command failed with exit code 127: " in warning
    assert warning.endswith(
        "the call was blocked because hooks fail closed (the command or its interpreter was "
        "not found or cannot run: check the script's #! line (Windows line endings end it in "
        "\\r, and /bin/sh\\r is not found: sed -i 's/\\r$//' ./hooks/check.sh) and that the "
        "program is installed)"
    )
    assert "|| true" not in warning  # exit 1's hint, which 127 is not
