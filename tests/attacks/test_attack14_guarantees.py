"""Attack round 14: the OS sandbox of python_exec and shell against a hostile model, in the
default configuration. Each test states the safe behaviour; one fim does not hold yet is a
strict xfail saying why (/work/notes/attack-14.md). They run the real tools in real
bubblewrap and are skipped only where bubblewrap is missing."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.sandbox import cgroup, limits, output, watchdog
from fim.tools.sandbox.limits import MAX_FOLDER_FILES

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)


def make_tools(root: Path, secrets: frozenset[str] = frozenset(), **agent: Any) -> ToolRegistry:
    agent.setdefault("name", "attacker")
    agent.setdefault("tools", ["python_exec", "shell"])
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=Project(), secrets=secrets),
        agent=AgentDecl(**agent),
        services=Services(providers=CAPABILITIES, root=root),
    )
    return ToolRegistry(builtin.provide(ctx).tools)


MEMFD = """
import os, time
chunk = b'x' * (1 << 20)
for i in range(6):                      # 6 x 48 MB = 288 MB, each file under RLIMIT_FSIZE
    fd = os.memfd_create('m%d' % i)
    for _ in range(48):
        os.write(fd, chunk)
time.sleep(1)                           # held: the watchdog ticks every 50 ms
print('held 288 MB')
"""

SYSV_SHM = r"""
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
size = 96 << 20
for i in range(3):                      # 3 x 96 MB, each detached after it is touched
    sid = libc.shmget(0, ctypes.c_size_t(size), 0o1600)
    addr = libc.shmat(sid, None, 0)
    ctypes.memset(addr, 1, size)
    libc.shmdt(ctypes.c_void_p(addr))
time.sleep(1)
print('held 288 MB')
"""


@needs_bwrap
@pytest.mark.skipif(
    cgroup.why_not() is not None,
    reason=(
        "attack-14 #1 holds only where fim gets a memory cgroup (the kernel charges memfd and"
        f" SysV shm pages there), and this host gives it none: {cgroup.why_not()}"
    ),
)
def test_memory_held_outside_any_mapping_counts_toward_the_trees_limit(tmp_path: Path) -> None:
    """`memory_mb` caps the whole tree: the watchdog sums the resident memory of every
    process. Pages of a memfd written with write() and of a SysV segment that was detached
    are in no process's RSS (and RLIMIT_AS does not see them), so with `memory_mb: 128` a
    program holds 288 MB (in the demo, 1.5 GB against 512) until its deadline, up to 300 s,
    in each of the sandboxes running at once. The safe behaviour: the call is killed for
    memory, as a program mapping the same pages is."""
    tools = make_tools(tmp_path, sandbox={"memory_mb": 128})

    async def run(code: str) -> Any:
        return await tools.call("python_exec", {"code": code}, timeout=60)

    for code in (MEMFD, SYSV_SHM):
        result = asyncio.run(run(code))
        # today: "[exit code 0] --- stdout --- held 288 MB" for both
        assert result.is_error, result.content
        assert "memory" in result.content


@needs_bwrap
def test_one_call_cannot_fill_its_folder_with_files_past_the_folders_file_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox folder may hold at most `MAX_FOLDER_FILES` entries (past it, it counts as
    full). The watchdog counts the folder only after the disk's free *bytes* dropped by the
    room the call had (up to `disk_mb`, 1 GB); empty files take inodes, not bytes, so one
    call creates 160,000 of them (about 36,000 a second here: a 300 s call can use up the
    16M inodes of the host's disk), and they stay on the host after the call. The safe
    behaviour: the call is killed once the folder is past the file cap: the watchdog
    counts the folder again each time the disk lost `MAX_FOLDER_FILES / 4` inodes. (The
    cap is lowered to 10,000 here, and the call waits once past the first count: the same
    arithmetic, a fifth of the files.)"""
    cap = MAX_FOLDER_FILES // 10
    for module in (limits, watchdog, output):
        monkeypatch.setattr(module, "MAX_FOLDER_FILES", cap)
    tools = make_tools(tmp_path, tools=["python_exec"])
    count = watchdog.FILES_STEP + 5_000  # the first count comes after FILES_STEP inodes
    code = f"""
import os
os.makedirs('many', exist_ok=True)
fd = os.open('many', os.O_RDONLY)
for i in range({count}):
    os.close(os.open(str(i), os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
print('created {count}', flush=True)
import time
time.sleep(60)  # killed meanwhile: the folder is past its cap
print('never killed')
"""
    result = asyncio.run(tools.call("python_exec", {"code": code, "timeout": 120}, timeout=150))
    left = tmp_path / ".fim" / "sandbox" / "scratch" / "many"
    created = sum(1 for _ in os.scandir(left)) if left.is_dir() else 0
    shutil.rmtree(left, ignore_errors=True)  # not left for pytest's tmp_path retention
    # before the fix: "[exit code 0] ... created 160000" (at the real cap), and they stayed
    assert result.is_error, result.content
    assert f"more than {cap:,} files" in result.content  # the cap, named
    assert "never killed" not in result.content and created <= count


@needs_bwrap
def test_a_sandbox_env_secret_is_not_on_any_host_command_line(tmp_path: Path) -> None:
    """`sandbox.env` values (`GH_TOKEN: ${GH_TOKEN}`) are secrets: masked at every exit. They
    were handed to bwrap as `--setenv NAME VALUE`, so while a call ran they were in
    /proc/<pid>/cmdline of bwrap's two processes, which every local user of the host (and
    process accounting, audit logs, crash reports) reads: `ps aux` shows the token. The
    safe behaviour: no host process's command line holds the value (bwrap's options,
    `--setenv` included, are given on a descriptor: `--args FD`)."""
    secret = "ghp_attack14PlantedToken0123456789"
    tools = make_tools(
        tmp_path, secrets=frozenset({secret}), tools=["shell"], sandbox={"env": {"T": secret}}
    )

    def holding_it() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if secret.encode() in (entry / "cmdline").read_bytes():
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    async def scenario() -> list[int]:
        call = asyncio.ensure_future(
            tools.call("shell", {"command": "sleep 2; echo done"}, timeout=30)
        )
        seen: list[int] = []
        for _ in range(150):  # until the call ends: bwrap is up within a few ticks
            seen += holding_it()
            if seen or call.done():
                break
            await asyncio.sleep(0.01)
        result = await call
        assert "done" in result.content
        return seen

    assert asyncio.run(scenario()) == []  # before the fix: bwrap's outer process and its init
