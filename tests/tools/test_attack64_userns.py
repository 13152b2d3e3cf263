"""Attack round 64, F1: in the sandbox's user-namespace mode as root (root without
CAP_SYS_ADMIN, as in Docker) bwrap mapped the sandbox's uid 65534 onto host uid 0, so a
model's `shell` call wrote host kernel settings (/proc/sys; `core_pattern` is a host escape).

Now no namespace a command runs in maps host root: fim makes the call's user namespaces
itself (fim/tools/sandbox/userns.py), the command is host uid 65534 with no capability in
both modes, /proc/sys is read-only whatever the user, and the launcher refuses to start a
command whose uid is root outside its namespace (a sandbox started the old way runs
nothing). Each test runs as fim runs here and, as root, in the user-namespace mode
(`mode`); one also runs fim for real without CAP_SYS_ADMIN (`setpriv`).

No test changes a host setting: a sysctl is written only with the value it already has,
and `core_pattern` is only opened for writing, never written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fim.tools import sandbox
from fim.tools.sandbox.command import NOBODY, command_line
from fim.tools.sandbox.limits import Limits

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="fim is root only as root")
SYSCTL = Path("/proc/sys/kernel/printk_ratelimit_burst")


async def run(tmp_path: Path, command: str) -> sandbox.Outcome:
    folder = tmp_path / "sandbox"
    return await sandbox.run(["sh", "-c", command], scratch=folder / "scratch", folder=folder)


def mapped(uid_map: str, inside: int) -> int | None:
    """The uid outside the namespace that `inside` is, by a /proc/<pid>/uid_map."""
    for line in uid_map.splitlines():
        first, host, count = (int(n) for n in line.split())
        if first <= inside < first + count:
            return host + inside - first
    return None


@needs_bwrap
async def test_the_sandboxs_user_is_host_uid_65534_never_host_root(
    tmp_path: Path, mode: str
) -> None:
    done = await run(tmp_path, 'id -u; cat /proc/self/uid_map; touch "$HOME/written"')
    assert done.returncode == 0, done.stderr.text()
    uid, _, uid_map = done.stdout.text().partition("\n")
    assert int(uid) == NOBODY
    assert mapped(uid_map, NOBODY) == NOBODY, uid_map
    if mode == "user namespace":  # nothing in the command's namespace is host root
        assert all(int(line.split()[1]) != 0 for line in uid_map.splitlines()), uid_map
    written = tmp_path / "sandbox" / "scratch" / "written"
    if os.geteuid() == 0:  # what it writes is host nobody's, not root's
        assert written.stat().st_uid == NOBODY
    else:
        assert written.stat().st_uid == os.geteuid()


@needs_bwrap
async def test_the_sandbox_holds_no_capability(tmp_path: Path, mode: str) -> None:
    done = await run(tmp_path, "grep -E '^Cap(Prm|Eff|Amb):' /proc/self/status")
    found = dict(line.split(":") for line in done.stdout.text().splitlines())
    assert found and all(int(value, 16) == 0 for value in found.values()), found


@needs_bwrap
async def test_a_host_sysctl_cannot_be_written_from_the_sandbox(tmp_path: Path, mode: str) -> None:
    before = SYSCTL.read_text().strip()
    # the value it already has: were the write to succeed, the host would still be unchanged
    done = await run(
        tmp_path,
        f"echo {before} > {SYSCTL} && echo wrote; "
        "python3 -c \"open('/proc/sys/kernel/core_pattern', 'w')\" && echo opened",
    )
    out = done.stdout.text()
    assert "wrote" not in out and "opened" not in out, out
    said = done.stderr.text()
    assert "Read-only file system" in said, said
    assert SYSCTL.read_text().strip() == before


@needs_bwrap
@needs_root
def test_a_sandbox_whose_uid_is_root_outside_runs_nothing(tmp_path: Path) -> None:
    """The old command line (bwrap, run by root, making the user namespace itself): the
    launcher sees its uid 65534 is host root and refuses to start the command."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = command_line(
        ["sh", "-c", "echo ran"],
        scratch=scratch,
        env={},
        limits=Limits(),
        data_fds={},
        as_root=False,
        bwrap=sandbox.bwrap_path() or "bwrap",
    )
    assert "--unshare-user" in args
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert "ran" not in done.stdout
    assert "refusing to run as root" in done.stderr, done.stderr


@needs_bwrap
@needs_root
def test_root_probes_the_user_namespace_mode_as_calls_run() -> None:
    assert sandbox._user_starts(sandbox.bwrap_path() or "bwrap") is None


PROGRAM = """\
import asyncio, sys
from pathlib import Path
from fim.tools import sandbox
folder = Path(sys.argv[1])
done = asyncio.run(sandbox.run(
    ["sh", "-c", "cat /proc/self/uid_map; echo $(cat {sysctl}) > {sysctl} || echo refused"],
    scratch=folder / "scratch", folder=folder,
))
print(done.stdout.text(), done.stderr.text(), done.setup_error)
"""


@needs_bwrap
@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed")
def test_root_without_cap_sys_admin_runs_the_sandbox_as_host_nobody(tmp_path: Path) -> None:
    """For real, as in a container: fim itself without CAP_SYS_ADMIN."""
    before = SYSCTL.read_text().strip()
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--",
         sys.executable, "-c", PROGRAM.format(sysctl=SYSCTL), str(tmp_path / "sandbox")],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )  # fmt: skip
    out = done.stdout
    assert "refused" in out and "Read-only file system" in out, (out, done.stderr)
    assert mapped(out.split("refused")[0].strip().splitlines()[0], NOBODY) == NOBODY, out
    assert SYSCTL.read_text().strip() == before
