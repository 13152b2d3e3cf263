"""The sandbox's /tmp (attack-60 round): a tmpfs of `tmp_mb` (64 MB) that the sandboxed
program may write, as docs/security.md promises and TMPDIR=/tmp says, in both user modes.

In root mode bwrap runs privileged and the program runs as host uid 65534: a plain
`--tmpfs /tmp` is root's and 0755 there, so the program could not write its own TMPDIR,
`tempfile` fell back to the long scratch path and a multiprocessing `forkserver` pool failed
("AF_UNIX path too long"). /tmp is now 1777 (sticky) in both modes, still capped, and a
fresh one per call: nothing written there reaches the next call or another key's call.

Each test runs in the mode this host gives fim and, as root, in the user-namespace mode too
(`sandbox._PRIVILEGED = False`). An older bubblewrap without `--size` fails the start-up
probe, so no call runs (fail closed) and the operator is told to upgrade. Offline; the
sandbox tests are skipped where bubblewrap is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.sandbox.command import command_line
from fim.tools.sandbox.limits import Limits

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)


def tools_for(root: Path, owner: str = "") -> ToolRegistry:
    """The sandbox tools of a run; `owner` (an API key's id) gets its key's own folder."""
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=Project()),
        agent=AgentDecl(name="a", tools=["python_exec", "shell"]),
        services=Services(providers=CAPABILITIES, root=root),
        owner=owner,
    )
    return ToolRegistry(builtin.provide(ctx).tools)


async def shell(tools: ToolRegistry, command: str) -> str:
    return (await tools.call("shell", {"command": command}, timeout=60)).content


@needs_bwrap
async def test_shell_writes_tmp_which_is_sticky_and_everyones(tmp_path: Path, mode: str) -> None:
    out = await shell(
        tools_for(tmp_path),
        "echo hello > /tmp/x && cat /tmp/x && stat -c 'mode=%a' /tmp",
    )
    assert "hello" in out and "mode=1777" in out, out


@needs_bwrap
async def test_python_exec_mkstemp_lands_in_tmp(tmp_path: Path, mode: str) -> None:
    code = (
        "import os, tempfile\n"
        "fd, path = tempfile.mkstemp()\n"
        "os.write(fd, b'data'); os.close(fd)\n"
        "print('made', os.path.dirname(path))\n"
    )
    result = await tools_for(tmp_path).call("python_exec", {"code": code}, timeout=60)
    assert "made /tmp" in result.content.splitlines(), result.content


POOL = """\
import multiprocessing
if __name__ == "__main__":
    with multiprocessing.get_context("forkserver").Pool(2) as pool:
        print("pool", sum(pool.map(abs, [-1, -2, -3])))
"""


@needs_bwrap
async def test_a_forkserver_pool_works(tmp_path: Path, mode: str) -> None:
    """Its listening socket is made under TMPDIR: with /tmp unwritable it went under the
    scratch path, too long for a Unix socket address."""
    out = await shell(tools_for(tmp_path), f"cat > pool.py <<'EOF'\n{POOL}EOF\npython3 pool.py")
    assert "pool 6" in out, out
    assert "too long" not in out, out


@needs_bwrap
async def test_tmp_holds_at_most_tmp_mb(tmp_path: Path, mode: str) -> None:
    """64 MB fit (in files under the per-file limit); 70 MB do not: the tmpfs is full."""
    out = await shell(
        tools_for(tmp_path),
        "for i in 1 2 3 4 5 6 7; do "
        "head -c 10000000 /dev/zero > /tmp/f$i || { echo full-at-$i; break; }; done; "
        "echo held=$(cat /tmp/f* | wc -c)",
    )
    assert "No space left on device" in out and "full-at-7" in out, out
    held = next(line for line in out.splitlines() if line.startswith("held="))
    assert 60_000_000 < int(held.removeprefix("held=")) <= 64 * 1024 * 1024, out


@needs_bwrap
async def test_what_a_call_leaves_in_tmp_is_gone_for_the_next_call_and_other_keys(
    tmp_path: Path, mode: str
) -> None:
    tools = tools_for(tmp_path, owner="key-a")
    wrote = await shell(tools, "echo secret > /tmp/left && cat /tmp/left")
    assert "secret" in wrote, wrote
    again = await shell(tools, "ls -A /tmp; echo listed")
    other = await shell(tools_for(tmp_path, owner="key-b"), "ls -A /tmp; echo listed")
    for out in (again, other):
        assert "listed" in out and "left" not in out, out


def test_tmp_and_dev_shm_are_mounted_1777_and_capped_in_both_modes(tmp_path: Path) -> None:
    for as_root in (True, False):
        args = command_line(
            ["true"], scratch=tmp_path / "s", env={}, limits=Limits(tmp_mb=5),
            data_fds={}, as_root=as_root, bwrap="bwrap",
        )  # fmt: skip
        mounts = {args[i + 1]: args[i - 4 : i] for i, a in enumerate(args) if a == "--tmpfs"}
        for dest in ("/tmp", "/dev/shm"):
            assert mounts[dest] == ["--perms", "01777", "--size", str(5 << 20)], as_root


def test_a_bubblewrap_without_size_fails_the_probe_and_says_to_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: no call runs on a bwrap that cannot cap /tmp, and the line says why."""
    old = tmp_path / "bwrap"
    old.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = --size ] && '
        "{ echo 'bwrap: Unknown option --size' >&2; exit 1; }; done\nexit 0\n"
    )
    old.chmod(0o755)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: str(old))
    why = sandbox.unavailable()
    assert why is not None and "Unknown option --size" in why, why
    assert "bubblewrap 0.7 or newer" in why, why
