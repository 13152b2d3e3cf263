"""Attack round 23 (what crosses fim's process boundaries): what must hold.

Each test is a strict xfail stating the safe behaviour of a finding of
`/work/notes/attack-23.md`; `--runxfail` shows each failing on its assertion today:

- #1 In user-namespace mode (fim not root, the deployment docs/security.md recommends; or
  root without CAP_SYS_ADMIN) bwrap's own init is PID 1 of the sandbox, runs as the
  sandbox's user, and was started with fim's whole environment: a model's `shell` call
  reads every API key and password of the server from `/proc/1/environ`.
- #2 A command hook (and a stdio MCP server: the same parent) gets an allow-listed
  environment, but reads fim's whole environment from `/proc/<its parent>/environ`.
- #3 A command hook's background process outlives the hook call it was started by.

Offline; the sandbox tests skip where bubblewrap is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project
from fim.hooks.command_process import run_command
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox

SECRET = "sk-fim-attack23-planted-0123456789abcdef"

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)


def shell_tools(root: Path) -> ToolRegistry:
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=Project()),
        agent=AgentDecl(name="attacker", tools=["shell"]),
        services=Services(providers=CAPABILITIES, root=root),
    )
    return ToolRegistry(builtin.provide(ctx).tools)


# ------------------------------------------- #1 bwrap's init holds fim's environment (userns)


@needs_bwrap
async def test_a_sandboxed_call_never_reads_the_servers_environment_from_bwraps_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox's environment is PATH, HOME, TMPDIR, LANG and what the agent declares,
    and "the server's /proc/<pid>/environ is out of reach". In user-namespace mode PID 1
    of the sandbox is bwrap itself, started by fim with fim's environment and running as
    the sandbox's user, so its environ is readable: a model reads OPENAI_API_KEY there and
    gets it past masking reversed (`rev`). Safe: bwrap starts with an environment holding
    nothing the sandboxed program may not see."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # what the server's environment holds
    if os.geteuid() == 0:  # as fim running as a normal user (or root without privileges)
        monkeypatch.setattr(sandbox, "_PRIVILEGED", False)
    tools = shell_tools(tmp_path)
    result = await tools.call(
        "shell", {"command": "cat /proc/self/uid_map; tr '\\0' '\\n' </proc/1/environ | rev"}
    )
    assert " 1\n" in result.content  # it ran, in a user namespace (one uid mapped)
    assert SECRET[::-1] not in result.content  # today: the key, reversed


# -------------------------------------- #2 a hook reads fim's environment from its parent

SPY = """\
import os, sys
found = []
pid = os.getppid()
for _ in range(3):  # sh -c, then fim
    try:
        if sys.argv[1].encode() in open(f"/proc/{pid}/environ", "rb").read():
            found.append(pid)
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        break
    pid = int(stat.rsplit(")", 1)[1].split()[1])
open("spied.json", "w").write(__import__("json").dumps(found))
print("{}")
"""


def test_a_command_hook_never_reads_fims_environment_from_its_parent(tmp_path: Path) -> None:
    """Hook processes get an allow-listed environment: "model and connector keys are never
    passed unless" declared. The hook (like a stdio MCP server, whose environment is
    minimal for the same reason) runs as fim's user, so fim's `/proc/<pid>/environ`, the
    block the process started with, hands it every key anyway. Safe: what a hook learns
    of fim's environment is what it was given (fim erases its start-up block once
    `os.environ` holds the values, and is not dumpable)."""
    files = {
        "fim.yaml": 'name: a23\nstate: "sqlite:///.fim/state.db"\n'
        "models: {general: scripted}\ntool_selection: {enabled: false}\n",
        "agents/h.yaml": "description: d\nmodel: scripted:h.script.yaml\n"
        "tools: [calculator]\nhooks:\n"
        f"  - {{event: PreToolUse, matcher: '*', command: '{sys.executable} hooks/spy.py "
        f"{SECRET}'}}\n",
        "h.script.yaml": "- tool_calls: [{name: calculator, arguments: {expression: '1+1'}}]\n"
        "- text: done\n",
        "hooks/spy.py": SPY,
    }
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    done = subprocess.run(
        [sys.executable, "-c", "from fim.cli import main; main()", "run", "h", "go"],
        cwd=tmp_path,
        env={**env, "OPENAI_API_KEY": SECRET, "PYTHONPATH": str(Path(__file__).parents[2])},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    spied: list[Any] = json.loads((tmp_path / "spied.json").read_text())
    assert spied == []  # today: fim's pid, whose environ holds OPENAI_API_KEY


# ------------------------------------------ #3 a hook's background process outlives it


async def test_a_command_hooks_background_process_ends_with_the_hook_call(
    tmp_path: Path,
) -> None:
    """A command hook "starts in a session of its own, and on a timeout or a cancelled
    call its whole process group is killed, so a `sleep` in a script ... cannot outlive
    the call it guards". On a normal exit nothing is killed: a hook's `scanner "$file" &`
    (its arguments model-written) goes on after the call, for as long as it likes, and
    after `fim serve` stopped. Safe: the call returns once every process it started is
    gone."""
    code, out, _ = await run_command(
        "sleep 300 >/dev/null 2>&1 & echo $!",
        "{}",
        {"PATH": os.defpath},
        cwd=str(tmp_path),
        timeout=10,
    )
    assert code == 0
    pid = int(out.split()[0])
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert state in ("gone", "Z", "X")  # today: "S", sleeping on after the call
