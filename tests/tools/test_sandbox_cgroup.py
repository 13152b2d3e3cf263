"""The sandbox's second memory layer (fim/tools/sandbox/cgroup.py): each call's tree runs in
a memory cgroup of its own, so the kernel caps the memory no resident set shows (memfd,
detached SysV shared memory: attack-14 #1), and the cgroup is gone once the call returns.

Tests that need a cgroup run the real tools in real bubblewrap and are skipped, saying why,
on a host where fim gets no writable memory cgroup (not root, no v2 delegation): there the
watchdog is the only layer. This machine and CI run as root with cgroup v1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fim.tools import sandbox
from fim.tools.sandbox import cgroup
from fim.tools.sandbox.process import CGROUP_SLACK_MB, execute

_WHY = sandbox.unavailable() or cgroup.why_not()
needs_cgroup = pytest.mark.skipif(
    _WHY is not None, reason=f"no memory cgroup for the sandbox on this host: {_WHY}"
)

MEMFD_288_MB = """
import os, time
chunk = b'x' * (1 << 20)
for i in range(6):                      # 6 x 48 MB, each under RLIMIT_FSIZE, in no mapping
    fd = os.memfd_create('m%d' % i)
    for _ in range(48):
        os.write(fd, chunk)
time.sleep(1)
print('held 288 MB')
"""


def mine() -> set[Path]:
    """This process's call cgroups that exist now."""
    found = cgroup.base()
    assert found is not None
    return set(found.path.glob(f"{cgroup.PREFIX}{os.getpid()}-*"))


@needs_cgroup
async def test_memory_no_process_maps_is_capped_by_the_kernel_and_reads_as_the_memory_limit(
    tmp_path: Path,
) -> None:
    """288 MB in memfds is in no resident set, so the watchdog's count stays far below
    128 MB; the kernel charges the pages to the call's cgroup and OOM-kills there, and the
    model reads the same message as for memory the watchdog saw."""
    outcome = await sandbox.run(
        [sys.executable, "-c", MEMFD_288_MB],
        scratch=tmp_path / "scratch",
        limits=sandbox.Limits(memory_mb=128, timeout=60),
    )
    assert "held" not in outcome.stdout.text()
    assert outcome.memory_exceeded
    assert outcome.peak_memory < 128 * 1024 * 1024  # not the watchdog's kill: the kernel's
    shown = sandbox.observation(outcome, limit=60, memory_mb=128, max_output=1000, fix="", empty="")
    assert not isinstance(shown, str) and shown.is_error
    assert "the processes used more than 128 MB of memory together" in shown.content
    assert not mine()


@needs_cgroup
async def test_concurrent_calls_each_get_a_cgroup_of_their_own_that_is_gone_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls at once: each tree is in its own cgroup (its limit, `memory_mb` plus
    `CGROUP_SLACK_MB`), entered before the command ran (the command's own process is
    listed there), and neither cgroup exists once the calls returned."""
    made: list[cgroup.MemoryCgroup] = []
    create = cgroup.create

    def recording(base: cgroup.Base, limit_bytes: int) -> cgroup.MemoryCgroup | None:
        group = create(base, limit_bytes)
        assert group is not None
        made.append(group)
        return group

    monkeypatch.setattr(cgroup, "create", recording)
    scratch = tmp_path / "scratch"
    before = mine()
    wait_for_go = "i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"
    calls = [
        asyncio.ensure_future(
            sandbox.run(
                ["sh", "-c", wait_for_go],
                scratch=scratch,
                limits=sandbox.Limits(memory_mb=mb, timeout=60),
            )
        )
        for mb in (100, 200)
    ]
    for _ in range(600):  # until both trees run (bounded: 30 s)
        if len(made) == 2 and all(len(g.pids()) >= 3 for g in made):
            break
        await asyncio.sleep(0.05)
    held = [set(g.pids()) for g in made]
    limits = sorted(int((g.path / "memory.limit_in_bytes").read_text()) for g in made)
    (scratch / "go").touch()
    outcomes = await asyncio.gather(*calls)
    assert [o.returncode for o in outcomes] == [0, 0]
    assert len({g.path for g in made}) == 2
    assert all(len(p) >= 3 for p in held)  # sh, bwrap's init and the command at least
    assert not held[0] & held[1]
    assert limits == [(mb + CGROUP_SLACK_MB) << 20 for mb in (100, 200)]
    assert not any(g.path.exists() for g in made)
    assert mine() == before == set()


@needs_cgroup
async def test_a_call_that_cannot_enter_its_cgroup_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: when the shell cannot write itself into the cgroup it does not start
    bwrap, and the call reports that the sandbox could not start."""
    real = cgroup.join_argv

    def broken(group: cgroup.MemoryCgroup, args: list[str]) -> list[str]:
        return real(cgroup.MemoryCgroup(group.path / "missing", group.version), args)

    monkeypatch.setattr(cgroup, "join_argv", broken)
    scratch = tmp_path / "scratch"
    outcome = await sandbox.run(["sh", "-c", "touch ran"], scratch=scratch)
    assert (outcome.setup_error or "").startswith(cgroup.JOIN_ERROR)
    assert not (scratch / "ran").exists()
    assert not mine()


@needs_cgroup
async def test_a_call_whose_cgroup_the_host_refuses_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: on a host that gives fim cgroups, a call whose own cgroup cannot be made
    (the kernel refused the folder or its limit) does not run under the watchdog alone."""
    monkeypatch.setattr(cgroup, "create", lambda base, limit_bytes: None)
    scratch = tmp_path / "scratch"
    outcome = await sandbox.run(["sh", "-c", "touch ran"], scratch=scratch)
    assert "memory cgroup" in (outcome.setup_error or "")
    assert not (scratch / "ran").exists()


@needs_cgroup
def test_cgroups_of_a_fim_process_that_died_are_swept_at_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fim killed mid-call leaves an empty `fim-sandbox-<pid>-<n>`: the next fim process
    deletes it when it first looks for its base."""
    found = cgroup.base()
    assert found is not None
    gone = subprocess.Popen(["true"])  # a pid that is gone now
    gone.wait()
    stale = found.path / f"{cgroup.PREFIX}{gone.pid}-1"
    stale.mkdir()
    monkeypatch.setattr(cgroup, "_FOUND", None)
    assert cgroup.base() == found
    assert not stale.exists()


def test_without_a_usable_cgroup_the_watchdog_alone_runs_calls_and_fim_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not root, no delegation: no sandbox call fails for it; one info line says the memory
    cap is the watchdog's alone and why (newcomer5 #6: not a warning on every `fim run`)."""
    monkeypatch.setattr(cgroup, "_FOUND", None)
    monkeypatch.setattr(cgroup, "_discover", lambda: (None, "the cgroup /x is not writable"))
    with caplog.at_level(logging.INFO, logger="fim.sandbox"):
        assert cgroup.base() is None
        assert cgroup.base() is None
    assert cgroup.why_not() == "the cgroup /x is not writable"
    said = [r.getMessage() for r in caplog.records if r.name == "fim.sandbox"]
    assert len(said) == 1
    assert "watchdog alone" in said[0] and "the cgroup /x is not writable" in said[0]


def test_a_v2_cgroup_without_the_memory_controller_is_not_used(tmp_path: Path) -> None:
    """cgroup v2: a child may have `memory.max` only when the memory controller reaches
    it; without it fim neither moves itself nor creates anything."""
    here = tmp_path / "app.scope"
    here.mkdir()
    (here / "cgroup.controllers").write_text("cpu io pids\n")
    (here / "cgroup.subtree_control").write_text("")
    found, why = cgroup._delegated(here)
    assert found is None
    assert "memory controller is not enabled" in why
    assert sorted(p.name for p in here.iterdir()) == [
        "cgroup.controllers",
        "cgroup.subtree_control",
    ]


def test_a_v2_cgroup_fim_already_left_for_its_leaf_is_the_base(tmp_path: Path) -> None:
    """A fim that found itself in its own `fim-supervisor` leaf (moved there earlier) makes
    the calls' cgroups beside it, in the parent that has `+memory` for its children."""
    parent = tmp_path / "fim.service"
    (parent / cgroup.LEAF).mkdir(parents=True)
    (parent / "cgroup.subtree_control").write_text("memory pids\n")
    assert cgroup._delegated(parent / cgroup.LEAF) == (cgroup.Base(parent, 2), "")


async def test_a_call_cancelled_twice_while_its_cgroup_is_made_still_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread making a call's cgroup cannot be stopped: a call cancelled meanwhile (the
    engine's tool timeout, a cancelled run) waits for it and removes what it made, and a
    second cancel during that wait stops the waiting, not the removal (attack-18 #5). Any
    host: the cgroup is a folder of tmp_path here."""
    made, release = threading.Event(), threading.Event()
    folder = tmp_path / f"{cgroup.PREFIX}{os.getpid()}-1"

    def slow(base: cgroup.Base, limit_bytes: int) -> cgroup.MemoryCgroup | None:
        folder.mkdir()
        made.set()
        release.wait(30)  # until the test has cancelled the call twice
        return cgroup.MemoryCgroup(folder, base.version)

    monkeypatch.setattr(cgroup, "base", lambda: cgroup.Base(tmp_path, 2))
    monkeypatch.setattr(cgroup, "create", slow)
    call = asyncio.ensure_future(
        execute(["true"], tmp_path / "s", b"", {}, sandbox.Limits(), False, None, bwrap="bwrap")
    )
    while not made.is_set():
        await asyncio.sleep(0.01)
    call.cancel()
    for _ in range(3):  # the call takes the cancel and waits for the thread
        await asyncio.sleep(0)
    call.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(500):  # the removal runs on in a task of its own (bounded: 5 s)
        if not folder.exists():
            break
        await asyncio.sleep(0.01)
    assert not folder.exists()
