"""What one sandboxed command may use (`Limits`) and the kernel's share of enforcing it.

Its own module because a limit is declared once and enforced in two places: the kernel's
rlimits, set by the launcher inside the sandbox (`rlimits` here), and the watchdog outside
it (fim/tools/sandbox/watchdog.py), which sums what rlimits cannot see (a whole tree's
memory, the disk, processes where RLIMIT_NPROC does not bind).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fim.tools.folder_walk import TooBig, walk

MAX_FOLDER_FILES = 100_000
"""Files and folders a sandbox folder may hold (counting them is what a check of its size
costs); past it, it counts as full."""


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use. Defaults suit a data-processing snippet."""

    timeout: float = 30.0
    """Wall-clock seconds before the whole tree is killed."""
    memory_mb: int = 512
    """Per process (address space) and for the whole tree (resident memory)."""
    max_processes: int = 64
    """Processes and threads of the sandbox user (RLIMIT_NPROC)."""
    max_file_bytes: int = 64 * 1024 * 1024
    """Largest file a process may write (RLIMIT_FSIZE)."""
    tmp_mb: int = 64
    """Size of the tmpfs mounted on /tmp."""
    keep_output: int = 40_000
    """Bytes of stdout and of stderr kept; the rest is read and dropped."""
    disk_mb: int = 1024
    """What one call may write into its sandbox folder (files written there stay on the
    host after the call); without a folder to count, the free space of the disk holding
    scratch/ it may use up."""
    disk_reserve_mb: int = 256
    """Free space the sandbox never takes from that disk: below it the tree is killed, so
    calls that each stay under `disk_mb` cannot add up to a full disk."""
    inode_reserve_percent: int = 5
    """Share of that disk's inodes the sandbox never takes: below it the tree is killed.
    Empty files take inodes, not bytes, and a disk out of inodes fails every write on it
    (the state store, logs) as a full one does."""
    folder_mb: int = 2048
    """What the sandbox folder the call works in (its key's own, else the project's) may
    hold (the agent's `sandbox.folder_mb`): files stay there between calls, and without a
    cap one key's calls, each under `disk_mb`, added up to the disk's reserve and every
    other key's calls failed. A call that takes the folder past it is killed, or told so
    when it ended (the folder is counted once more then); one that finds it past it may
    still read and delete, writes files of at most `FOLDER_SLACK_MB` (RLIMIT_FSIZE), and
    is stopped once it has written that much more than it freed."""


def rlimits(limits: Limits) -> dict[str, tuple[int, int]]:
    """The rlimits the launcher sets before the command starts (soft, hard)."""
    memory = limits.memory_mb * 1024 * 1024
    cpu = int(limits.timeout) + 1
    return {
        "RLIMIT_AS": (memory, memory),
        "RLIMIT_CPU": (cpu, cpu + 1),
        "RLIMIT_FSIZE": (limits.max_file_bytes, limits.max_file_bytes),
        "RLIMIT_NPROC": (limits.max_processes, limits.max_processes),
        "RLIMIT_CORE": (0, 0),
    }


def held_bytes(folder: Path | int) -> int | None:
    """Bytes allocated under `folder`, a path or a directory descriptor (symlinks not
    followed; a folder that does not exist yet holds nothing), or None past
    `MAX_FOLDER_FILES` entries (or when a folder moved while it was counted): what
    `folder_mb` and `file_ops`' quota count. Walked without recursion, holding one folder
    open at a time (fim/tools/folder_walk.py: a tree 1,000 levels deep made `os.fwalk` raise
    RecursionError before every call, attack-52 F1). A folder in it that cannot be read
    raises (OSError): a program that made one unreadable must not hide what it holds."""
    if isinstance(folder, int):
        return _held(folder)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    try:
        return _held(fd)
    finally:
        os.close(fd)


def _held(top: int) -> int | None:
    total = os.fstat(top).st_blocks * 512
    try:
        for found in walk(top, max_entries=MAX_FOLDER_FILES, paths=False):
            total += found.info.st_blocks * 512
    except TooBig:
        return None
    return total
