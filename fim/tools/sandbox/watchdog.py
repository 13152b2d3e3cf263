"""The sandbox's process tree as the host sees it: what it uses, and how it is killed.

Its own module because this is what the kernel's rlimits cannot do: sum the resident memory
of the whole tree, watch the free space of the scratch disk, count its tasks (a belt where
fim is root in a user namespace: RLIMIT_NPROC binds there too), and kill the tree so that
nothing of it survives (the PID namespace's init first, then bwrap). Everything is read
from /proc and statvfs. Under it, where the host allows one, the kernel caps the tree's
memory in a cgroup of the call's own (fim/tools/sandbox/cgroup.py): the watchdog kills the
whole tree once the kernel killed in it for memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fim.tools.sandbox.cgroup import MemoryCgroup
from fim.tools.sandbox.limits import MAX_FOLDER_FILES, Limits, held_bytes

WATCH_INTERVAL = 0.05
FOLDER_SLACK_MB = 1
"""Disk a call may take before its folder is counted again when the folder was full at its
start: reading or deleting there is never stopped for what other processes write."""
FILES_STEP = MAX_FOLDER_FILES // 4
"""Inodes (files, folders, links) the disk may lose before the folder is counted again:
empty files take no bytes, so the free space alone never triggered a count, and one call
created millions of them (attack-14 #2)."""
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


MAX_TASKS_READ = 4096
"""Tasks (threads) whose children one poll reads at most: RLIMIT_NPROC keeps a sandbox far
under it, and a tree past it counts as past `max_processes` (attack64 F2: 9,505 threads
were read every 50 ms, on the event loop)."""


def _children(pid: int, tasks: list[int] | None = None, budget: int = MAX_TASKS_READ) -> list[int]:
    """The children of `pid`'s threads (of its first `budget` ones); `tasks` gets how many
    threads it has."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        names = os.listdir(f"/proc/{pid}/task")
        if tasks is not None:
            tasks.append(len(names))
        for task in names[:budget]:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    return found


def census(pid: int, budget: int = MAX_TASKS_READ) -> tuple[list[int], int]:
    """`pid` and its descendants, and how many tasks (threads included) they run, reading
    the entries of at most `budget` tasks (past it the count is at least `budget`). In a PID
    namespace every process descends from its init (orphans are re-parented to it), so
    this is the whole sandbox."""
    seen, todo, tasks = {pid: None}, [pid], [0]
    while todo and sum(tasks) < budget:
        for child in _children(todo.pop(), tasks, budget - sum(tasks)):
            if child not in seen:
                seen[child] = None
                todo.append(child)
    return list(seen), max(sum(tasks), len(seen))


def tree(pid: int, limit: int = MAX_TASKS_READ) -> list[int]:
    """`pid` and its descendants (`census`)."""
    return census(pid, limit)[0]


def _resident(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as f:
            total += int(f.read().split()[1]) * _PAGE
    return total


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _stopped(pid: int, tries: int = 200) -> None:
    """Wait (at most ~0.2 s, on the caller's thread: it is only ever a few scheduler ticks)
    until `pid` is stopped or gone."""
    for _ in range(tries):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[-1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("T", "t", "Z", "X"):
            return
        time.sleep(0.001)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


@dataclass
class Watchdog:
    """One running bwrap and what the watchdog saw of it; `kill` ends the whole tree."""

    process: asyncio.subprocess.Process
    limits: Limits
    seen: set[int] = field(default_factory=set)
    peak: int = 0
    memory_exceeded: bool = False
    count_processes: bool = False
    processes_exceeded: bool = False
    scratch: Path | None = None
    """Where the tree writes; the free space of its disk is watched (`Limits.disk_mb`)."""
    free_at_start: int | None = None
    disk_exceeded: bool = False
    folder: Path | None = None
    """The sandbox folder counted against `limits.folder_mb` (None: not counted)."""
    folder_full: bool = False
    taken: int = 0
    """Bytes of the disk's free space the call has taken so far (statvfs)."""
    room: int | None = None
    """`taken` at which the folder is counted next (None: not counted, `folder_room`)."""
    held_at_start: int | None = 0
    """What the folder held when the call began (None: it could not be counted, full; the
    first count that succeeds is the call's start then)."""
    full_at_start: bool = False
    counting: tuple[int, asyncio.Future[int | None]] | None = None
    """A count of the folder going on in a thread, and `taken` when it began."""
    counting_from: int = 0
    """`inodes_taken` when that count began."""
    inodes_at_start: int | None = None
    inodes_taken: int = 0
    """Free inodes of the disk the call has taken so far (the same statvfs)."""
    count_at: int = FILES_STEP
    """`inodes_taken` at which the folder is counted next."""
    inodes_low: bool = False
    """The disk had fewer free inodes than `limits.inode_reserve_percent` of all."""
    too_many_files: bool = False
    """The folder held more than `MAX_FOLDER_FILES` entries (or one fim cannot read)."""
    cgroup: MemoryCgroup | None = None
    """The tree's memory cgroup: the kernel OOM-killing there is the tree's memory limit
    too (memory no resident set shows: memfd, SysV shared memory)."""

    def disk_used_up(self) -> bool:
        """Whether the call left less than `disk_reserve_mb` of the scratch disk free or
        fewer than `inode_reserve_percent` of its inodes, or (with no `folder` to count)
        took more than `disk_mb` of its free space or `MAX_FOLDER_FILES` of its inodes: one
        statvfs, whose cost does not grow with the number of files written."""
        if self.scratch is None:
            return False
        try:
            free, inodes, all_inodes = free_space(self.scratch)
        except OSError:
            return False
        if self.free_at_start is None:
            self.free_at_start = free
        if self.inodes_at_start is None:
            self.inodes_at_start = inodes
        mb = 1024 * 1024
        taken = self.taken = self.free_at_start - free
        self.inodes_taken = self.inodes_at_start - inodes
        # all_inodes is 0 where the filesystem has no fixed inode table (btrfs): no reserve
        if inodes * 100 < all_inodes * self.limits.inode_reserve_percent:
            self.inodes_low = True
            return True
        if free < self.limits.disk_reserve_mb * mb:
            return True
        return self.folder is None and (
            taken > self.limits.disk_mb * mb or self.inodes_taken > MAX_FOLDER_FILES
        )

    def folder_grown(self) -> Literal["folder", "disk"] | None:
        """Whether the call took its folder past `folder_mb` ("folder") or wrote more than
        `disk_mb` into it ("disk"). The folder is counted (in a thread) before the call
        starts, then again each time the disk's free space has dropped by what the call
        had left or its free inodes by `FILES_STEP`: a statvfs per tick, the walk only
        that often (a folder past `MAX_FOLDER_FILES` entries is "folder": full). The free
        space is only the trigger, never the verdict, since every process on the disk
        changes it: another key writing a gigabyte (or a million files) does not stop this
        call. A call that found the folder full may take `FOLDER_SLACK_MB` more than it
        frees, counted like any other (another process filling the disk does not stop its
        `rm`): reading and deleting are never stopped."""
        if self.folder is None or self.room is None:
            return None
        mb = 1024 * 1024
        if self.counting is not None:
            began, count = self.counting
            if not count.done():
                return None
            self.counting = None
            held = None if count.cancelled() or count.exception() else count.result()
            self.count_at = self.counting_from + FILES_STEP
            verdict = self.judge(held)
            if verdict is not None:
                return verdict
            assert held is not None
            if self.full_at_start:
                self.room = began + FOLDER_SLACK_MB * mb
                return None
            assert self.held_at_start is not None  # set by `judge` from a count
            wrote = held - self.held_at_start
            left = min(self.limits.folder_mb * mb - held, self.limits.disk_mb * mb - wrote)
            self.room = began + max(left, FOLDER_SLACK_MB * mb)
        elif self.taken >= self.room or self.inodes_taken >= self.count_at:
            thread = asyncio.ensure_future(asyncio.to_thread(held_bytes, self.folder))
            self.counting, self.counting_from = (self.taken, thread), self.inodes_taken
        return None

    def judge(self, held: int | None) -> Literal["folder", "disk"] | None:
        """What a count of the folder (`held`: None past `MAX_FOLDER_FILES` entries or
        unreadable) says of the call: past `folder_mb` ("folder"; for a call that found it
        full, `FOLDER_SLACK_MB` more than at its start), more than `disk_mb` written into
        it ("disk"), or neither. Counted while the call runs and once more after it ended
        (`settle`)."""
        mb = 1024 * 1024
        self.too_many_files = held is None
        if held is None:
            return "folder"
        if self.held_at_start is None:  # found full, uncounted: the call is counted from here
            self.held_at_start = held
        wrote = held - self.held_at_start
        if self.full_at_start:
            return "folder" if wrote > FOLDER_SLACK_MB * mb else None
        if held > self.limits.folder_mb * mb:
            return "folder"
        return "disk" if wrote > self.limits.disk_mb * mb else None

    async def settle(self) -> None:
        """Count the folder once more after the tree is gone (attack-25 #3): the counts
        while it runs are polls, and a call that allocated its files at once and exited
        before the next one was never counted. Going past the cap reads as on a kill. A
        call that found the folder past what a count visits, and leaves it so, is told
        nothing, as one that found it past `folder_mb` and wrote no more: it may read."""
        if self.folder is None or self.room is None or self.folder_full:
            return
        try:
            held = await asyncio.to_thread(held_bytes, self.folder)
        except OSError:
            held = None
        if held is None and self.held_at_start is None:
            return
        grown = self.judge(held)
        self.folder_full = grown == "folder"
        self.disk_exceeded = self.disk_exceeded or grown == "disk"

    def kill(self) -> None:
        """Kill the namespace's init (the kernel then kills every process in the namespace),
        then bwrap's outer process.

        bwrap's outer process is stopped first: a clone it is in the middle of completes and
        no new one starts, so the list of its children is whole. Without that, a kill that
        came while bwrap was creating the namespace's init found no child, and the init,
        whose `--die-with-parent` was not armed yet, outlived the kill with its command and
        no time limit (seen under load: `tests/tools/test_sandbox.py`, a cancelled call)."""
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGSTOP)
            _stopped(pid)
        for child in _children(pid):
            _kill(child)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def sample(self, budget: int) -> tuple[list[int], int, int, bool, bool]:
        """One poll's reads (blocking: `watch` runs it in a thread): the tree's processes
        and tasks (`census`), its resident memory, whether the kernel killed in its cgroup
        for memory and whether the disk is used up (`disk_used_up`)."""
        pids, tasks = census(self.process.pid, budget)
        used = _resident(pids[1:])  # bwrap's outer process is ours, not the sandbox's
        oom = self.cgroup is not None and self.cgroup.oom_kills() > 0
        return pids, tasks, used, oom, self.disk_used_up()

    async def watch(self) -> None:
        """Sum the resident memory of the tree; kill it above the limit. With
        `count_processes` (a belt: RLIMIT_NPROC binds every mode) count its tasks too,
        threads included. The reads of each poll run in a thread, never on the event loop
        (attack64 F2: a walk of thousands of threads stalled every other run for ~1 s)."""
        cap = self.limits.memory_mb * 1024 * 1024
        budget = max(MAX_TASKS_READ, self.limits.max_processes + 3)
        while self.process.returncode is None:
            pids, tasks, used, oom, disk = await asyncio.to_thread(self.sample, budget)
            self.seen.update(pids)
            self.peak = max(self.peak, used)
            if used > cap or oom:
                self.memory_exceeded = True
            # outer bwrap and its init are not the program's (the launcher became it)
            if self.count_processes and tasks - 2 > self.limits.max_processes:
                self.processes_exceeded = True
            if disk:
                self.disk_exceeded = True
            grown = self.folder_grown()
            self.folder_full = self.folder_full or grown == "folder"
            self.disk_exceeded = self.disk_exceeded or grown == "disk"
            if (
                self.memory_exceeded
                or self.processes_exceeded
                or self.disk_exceeded
                or self.folder_full
            ):
                self.kill()
                return
            await asyncio.sleep(WATCH_INTERVAL)

    async def gone(self, within: float = 5.0) -> None:
        """Return once no process of the sandbox is left (bounded; a kernel that is slow
        to reap is not a reason to hang the run)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within
        self.seen.update(await asyncio.to_thread(tree, self.process.pid))
        while any(_alive(p) for p in self.seen) and loop.time() < until:
            await asyncio.sleep(0.01)


def file_cap(limits: Limits, full: bool) -> int:
    """RLIMIT_FSIZE for a call (attack-25 #3): `max_file_bytes` and `disk_mb`, and for a
    call that finds its folder full, `FOLDER_SLACK_MB`: the watchdog's counts are polls, and
    a file allocated at once (`fallocate`, `head -c`) was on disk before the next one. Such a
    call still reads and deletes; writing more fails (EFBIG, or SIGXFSZ for a program that
    does not ignore it). A call with room left keeps `max_file_bytes`: one file may take it
    past the cap, which the count after it ends reports."""
    mb = 1024 * 1024
    cap = min(limits.max_file_bytes, limits.disk_mb * mb)
    return min(cap, FOLDER_SLACK_MB * mb) if full else cap


def folder_room(folder: Path, limits: Limits) -> tuple[int, int | None, bool]:
    """Before a call starts (in a thread: it walks the folder): how much of the disk it may
    take before `folder` is counted again (`Watchdog.room`), what the folder holds (None: it
    cannot be counted), and whether that is past `limits.folder_mb` already. A folder that
    cannot be counted (too many entries, one fim cannot read) is full: the call
    still runs, so it may read and delete (attack-52 F1: a count that failed here had
    stopped every later call, `rm` included)."""
    mb = 1024 * 1024
    try:
        held = held_bytes(folder)
    except OSError:
        held = None
    cap = limits.folder_mb * mb
    room = 0 if held is None else min(cap - held, limits.disk_mb * mb)
    return max(room, FOLDER_SLACK_MB * mb), held, held is None or held > cap


def free_space(path: Path) -> tuple[int, int, int]:
    """Free bytes and free inodes of the disk holding `path`, for an unprivileged writer,
    and its number of inodes (0 where the filesystem has no fixed number)."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize, stat.f_favail, stat.f_files
