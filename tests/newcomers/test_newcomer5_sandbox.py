"""newcomer5 findings 2, 3 and 6 on the OS sandbox (fim/tools/sandbox/).

- #3: Debian's "alternatives" commands (awk, which, editor...) are links through
  /etc/alternatives, which the sandbox's minimal /etc now holds (read-only).
- #2: a bwrap that is installed but cannot start (user namespaces refused: AppArmor on
  Ubuntu 24.04, Docker's seccomp profile) is found by a probe once per process, so `fim
  validate` warns (`--strict` fails), the operator is told on stderr and the tool's error
  says what to do; nothing ever runs outside the sandbox. The refusal is a fake `bwrap`
  earlier on PATH printing bwrap's exact message, as the newcomer simulated it.
- #6: "memory_mb is enforced by the watchdog alone" is an info line (shown by `fim serve`'s
  log and `sandbox.notes()`), no longer a warning printed on every `fim run`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.cli import app
from fim.config.schema import AgentDecl, Project
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.sandbox import cgroup
from fim.tools.sandbox.output import Capture, Outcome
from fim.types import ToolResult

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)
REFUSED = "bwrap: setting up uid map: Permission denied"


def make_tools(root: Path, **agent: Any) -> ToolRegistry:
    agent.setdefault("name", "sh")
    agent.setdefault("tools", ["python_exec", "shell"])
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=Project()),
        agent=AgentDecl(**agent),
        services=Services(providers=CAPABILITIES, root=root),
    )
    return ToolRegistry(builtin.provide(ctx).tools)


async def shell(tools: ToolRegistry, command: str) -> ToolResult:
    return await tools.call("shell", {"command": command}, timeout=30)


# --------------------------------------------------------------------------- #3 alternatives


@needs_bwrap
@pytest.mark.skipif(
    not os.path.exists("/etc/alternatives/awk"), reason="no /etc/alternatives/awk on this host"
)
async def test_awk_runs_in_shell(tmp_path: Path) -> None:
    """/usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/mawk: a dangling link without
    /etc/alternatives in the sandbox ("awk: command not found")."""
    result = await shell(make_tools(tmp_path), "echo a b | awk '{print $2}'")
    assert result.content == "[exit code 0]\n--- stdout ---\nb", result.content


@needs_bwrap
async def test_etc_alternatives_is_read_only_in_the_sandbox(tmp_path: Path) -> None:
    if not os.path.isdir("/etc/alternatives"):
        pytest.skip("no /etc/alternatives on this host")
    result = await shell(make_tools(tmp_path), "touch /etc/alternatives/x; ls -d /etc/alternatives")
    assert "Read-only file system" in result.content, result.content
    assert not os.path.exists("/etc/alternatives/x")


# --------------------------------------------------------------------------- #2 cannot start


@pytest.fixture
def refusing_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `bwrap` first on PATH that fails the way a refused user namespace does, and counts
    how often it was started (in `calls`)."""
    folder = tmp_path / "fakebin"
    folder.mkdir()
    fake = folder / "bwrap"
    calls = tmp_path / "calls"
    fake.write_text(f"#!/bin/sh\necho x >> {calls}\necho '{REFUSED}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setattr(sandbox, "_PRIVILEGED", None)
    monkeypatch.setattr(sandbox, "_TOLD", set())
    return calls


def test_unavailable_names_the_refusal_and_what_to_do(refusing_bwrap: Path) -> None:
    why = sandbox.unavailable()
    assert why is not None
    assert why.startswith(f"the sandbox could not start: {REFUSED} (")
    assert "kernel.apparmor_restrict_unprivileged_userns=0" in why
    assert "AppArmor profile for bwrap" in why and "seccomp=unconfined" in why
    assert ("run fim as root" in why) is (os.geteuid() != 0)  # root needs no user namespace
    assert "\n" not in why


def test_as_a_normal_user_one_probe_and_the_hint_offers_root(
    refusing_bwrap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path of finding 2: not root, user namespaces refused."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    why = sandbox.unavailable()
    assert why is not None and "or run fim as root" in why
    assert len(refusing_bwrap.read_text().splitlines()) == 1


def test_bwrap_is_probed_once_per_process(refusing_bwrap: Path) -> None:
    """Root probes the privileged mode, then the user-namespace one; a normal user only
    the latter; never again for the same program."""
    for _ in range(3):
        assert sandbox.unavailable() is not None
    assert sandbox.warnings_for(["shell"])
    starts = len(refusing_bwrap.read_text().splitlines())
    assert starts == (2 if os.geteuid() == 0 else 1)


def _project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: t\n")
    (root / "agents" / "sh.yaml").write_text(
        "model: openai/gpt-4o-mini\ninstructions: Run.\ntools: [shell, python_exec]\n"
    )
    (root / "agents" / "plain.yaml").write_text("model: openai/gpt-4o-mini\ninstructions: Hi.\n")
    return root


def test_validate_warns_and_strict_fails_when_the_sandbox_cannot_start(
    refusing_bwrap: Path, tmp_path: Path
) -> None:
    root = _project(tmp_path / "p")
    result = CliRunner().invoke(app, ["validate", "--project", str(root)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 2 agents")
    [warning] = [line for line in result.stderr.splitlines() if "sandbox" in line]
    assert warning.startswith(
        "agents/sh.yaml:1:1: warning: python_exec, shell will refuse to run on this machine: "
        f"the sandbox could not start: {REFUSED} ("
    )
    strict = CliRunner().invoke(app, ["validate", "--strict", "--project", str(root)])
    assert strict.exit_code != 0
    assert REFUSED in strict.output


async def test_the_tools_refuse_tell_the_operator_once_and_run_nothing(
    refusing_bwrap: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = make_tools(tmp_path)
    with caplog.at_level(logging.WARNING, logger="fim.sandbox"):
        first = await shell(tools, "echo ran > ran.txt")
        again = await tools.call("python_exec", {"code": "open('ran.txt', 'w')"}, timeout=30)
    for result in (first, again):
        assert result.is_error
        assert result.content.startswith(f"Error: the sandbox could not start: {REFUSED} (")
        assert "kernel.apparmor_restrict_unprivileged_userns=0" in result.content
    told = [r.getMessage() for r in caplog.records if r.name == "fim.sandbox"]
    assert len(told) == 1 and told[0].startswith("python_exec and shell cannot run here: ")
    assert not list(tmp_path.rglob("ran.txt"))
    assert not (tmp_path / ".fim").exists()  # nothing was prepared, nothing ran


def test_a_refusal_when_a_call_starts_gets_the_same_hint() -> None:
    """The probe passed but bwrap failed for this call (the host changed since): the
    model's (and `fim run -v`'s) error still says what to do."""
    outcome = Outcome(returncode=1, stdout=Capture(0), stderr=Capture(0), setup_error=REFUSED)
    result = sandbox.observation(outcome, limit=1, memory_mb=1, max_output=1, fix="", empty="")
    assert isinstance(result, ToolResult)
    assert result.content.startswith(f"Error: the sandbox could not start: {REFUSED} (")
    assert "apparmor_restrict_unprivileged_userns" in result.content


@needs_bwrap
async def test_a_bwrap_that_starts_is_not_reported() -> None:
    assert sandbox.unavailable() is None
    assert await sandbox.refused() is None
    assert sandbox.warnings_for(["shell"]) == []


# --------------------------------------------------------------------------- #6 cgroup line


def test_no_memory_cgroup_is_an_info_line_once_not_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain `fim run` configures no logging: Python prints WARNING and above only, so an
    info record is not printed there; `fim serve` logs it at its default (info) level."""
    monkeypatch.setattr(cgroup, "_FOUND", None)
    monkeypatch.setattr(cgroup, "_discover", lambda: (None, "the cgroup /x is not writable"))
    with caplog.at_level(logging.DEBUG, logger="fim.sandbox"):
        assert cgroup.base() is None
        assert cgroup.base() is None
    records = [r for r in caplog.records if r.name == "fim.sandbox"]
    assert [r.levelno for r in records] == [logging.INFO]
    assert "Delegate=yes" in records[0].getMessage()


def test_notes_say_the_watchdog_alone_caps_memory_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cgroup, "_FOUND", (None, "the cgroup /x is not writable"))
    [note] = sandbox.notes()
    assert note.startswith(
        "sandbox memory_mb is enforced by the watchdog alone: the cgroup /x is not writable ("
    )
    assert "Delegate=yes" in note
    monkeypatch.setattr(cgroup, "_FOUND", (object(), ""))
    assert sandbox.notes() == []


def test_fim_run_verbose_shows_the_operators_info_lines_while_it_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`fim run -v` shows what the sandbox and hooks log at info (no memory cgroup here, a
    hook's stderr), escaped, while the run goes; afterwards the loggers are as before (a
    plain `fim run` prints warnings only: Python's last-resort handler)."""
    from fim.commands import run as run_command

    told = logging.getLogger("fim.sandbox")
    hooks = logging.getLogger("fim.hooks")
    before = (list(told.handlers), told.level, list(hooks.handlers), hooks.level)
    with run_command._operator_lines(True):
        told.info("sandbox memory_mb is enforced by the watchdog alone: \x1b]0;x\x07")
        hooks.info("hook 'h' stderr: checking")
    told.info("not shown")
    with run_command._operator_lines(False):
        hooks.info("not shown either")
    assert capsys.readouterr().err == (
        "fim: sandbox memory_mb is enforced by the watchdog alone: \\x1b]0;x\\x07\n"
        "fim: hook 'h' stderr: checking\n"
    )
    assert (list(told.handlers), told.level, list(hooks.handlers), hooks.level) == before
