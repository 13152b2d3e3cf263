"""Newcomer review 6, findings 10 and 11: a Claude Code user's hook scripts under `fim run`.
What a failing hook's block message says, and how a hook's `permissionDecision: "ask"` is
put to a human (or not, without a terminal), stated as the behaviour fixed. The hooks are
real scripts run by the real CLI.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

runner = CliRunner()

SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: done
"""

ASK = f"""\
#!{sys.executable}
import json, sys
json.load(sys.stdin)
print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PreToolUse",
    "permissionDecision": "ask", "permissionDecisionReason": "check with a human"}}}}))
"""


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def project(root: Path, hook: str, hooks: str) -> Path:
    """A project whose agent `dev` calls the calculator behind `.claude/hooks/<hook>`, the
    script `hooks` (Claude Code's folder, as a user copies it in)."""
    for folder in ("agents", "scripts", ".claude/hooks"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:scripts/s.yaml}\nstate: sqlite:///.fim/state.db\n"
    )
    (root / "scripts" / "s.yaml").write_text(SCRIPT)
    script = root / ".claude" / "hooks" / hook
    script.write_text(hooks)
    script.chmod(0o755)
    (root / "agents" / "dev.yaml").write_text(
        "description: d\nmodel: general\ntools: [calculator]\n"
        f"hooks: [{{event: PreToolUse, matcher: calculator, command: .claude/hooks/{hook}}}]\n"
    )
    return root


def blocked(err: str) -> str:
    """The block message as `fim run -v` says it once: the warning of a hook that failed,
    else the hook line (which only names a failure's decision: newcomer-50 #9)."""
    lines = err.splitlines()
    (line,) = [line for line in lines if line.startswith("warning: PreToolUse")] or [
        line for line in lines if "PreToolUse command" in line
    ]
    return line


# ---------------------------------------------------------------- 10: exit 1


def test_a_logging_hook_that_exits_1_blocks_and_says_how_exit_codes_differ_from_claude_code(
    tmp_path: Path,
) -> None:
    """In Claude Code exit 1 only logs; in fim it blocks (fail closed). The hint says so,
    not that a variable may be missing: nothing on stderr reads like one."""
    log = "#!/bin/sh\necho 'could not write log' >&2\nexit 1\n"
    root = project(tmp_path / "p", "log.sh", log)
    code, out, err = cli("run", "dev", "6*7?", "-v", "-p", str(root))
    assert code == 0 and out == "done\n"
    assert blocked(err).endswith(
        "failed: hook command failed with exit code 1: could not write log; the call was "
        "blocked because hooks fail closed (in fim only exit 0 allows; Claude Code treats "
        "exit 1 as non-blocking: end a logging hook with `|| true`)"
    )
    assert "env: [NAME]" not in err


@pytest.mark.parametrize(
    "stderr",
    [
        "line 3: GH_TOKEN: unbound variable",  # bash `set -u`
        "KeyError: 'GH_TOKEN'",  # os.environ["GH_TOKEN"]
        "GH_TOKEN is not set",
    ],
)
def test_a_hook_whose_stderr_names_a_missing_variable_keeps_the_environment_hint(
    tmp_path: Path, stderr: str
) -> None:
    script = f'#!/bin/sh\necho "{stderr}" >&2\nexit 1\n'
    root = project(tmp_path / "p", "needs.sh", script)
    _, _, err = cli("run", "dev", "6*7?", "-v", "-p", str(root))
    assert blocked(err).endswith(
        "hooks fail closed (a hook gets an allow-listed environment (PATH, HOME, LANG, ...): "
        "a variable it needs from fim's is passed with `env: [NAME]` on the hook)"
    )


# ---------------------------------------------------------------- 11: permissionDecision ask


def test_at_a_terminal_a_hooks_ask_shows_its_reason_on_the_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code shows `permissionDecisionReason` with its question; so does `fim run`."""
    import fim.commands.run_view as run_view

    asked: list[str] = []

    def answer(prompt: str, timeout: float | None = None) -> str:
        asked.append(prompt)
        return "y\n"

    monkeypatch.setattr(run_view, "interactive", lambda: True)
    monkeypatch.setattr(run_view, "read_answer", answer)
    root = project(tmp_path / "p", "ask.py", ASK)
    code, out, _ = cli("run", "dev", "6*7?", "-p", str(root))
    assert code == 0 and out == "done\n"
    [question] = asked
    assert re.fullmatch(
        r'\nAllow calculator \{"expression": "6\*7"\} \(check with a human\)\? \[y/N/a\] '
        r"\(expires in \S+( \S+)?; a: every call to calculator in this run\) ",
        question,
    ), question


def test_without_a_terminal_a_hooks_ask_is_denied_without_claiming_a_human_did(
    tmp_path: Path,
) -> None:
    """Nobody was asked: the run says `a hook asks` (not `a confirm hook`), and the block
    message the model reads says why it was denied, not that a reviewer denied it."""
    root = project(tmp_path / "p", "ask.py", ASK)
    code, out, err = cli("run", "dev", "6*7?", "-v", "-p", str(root))
    assert code == 0 and out == "done\n"
    (said,) = [line for line in err.splitlines() if line.startswith("denied calculator")]
    assert ": a hook asks a human and this run has no terminal" in said
    assert "`confirm`" not in err
    assert "human reviewer" not in err
    assert (
        "block: the call to 'calculator' was denied: nobody could be asked: fim run had no "
        "terminal (`fim run --wait-approvals` waits for `fim approvals approve ID`)" in blocked(err)
    )
    code, listed, _ = cli("approvals", "list", "--all", "--json", "-p", str(root))
    (approval,) = [json.loads(line) for line in listed.splitlines()]
    assert approval["status"] == "denied" and approval["reason"] == "check with a human"
