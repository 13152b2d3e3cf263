"""fim's secrets, out of its children's reach: the environment block it started with, and
its memory.

`/proc/<pid>/environ` shows the block the kernel wrote at `execve`, whatever the process
did with its variables since. fim's children get environments of their own (a command
hook and a stdio MCP server an allow-list, the sandbox nothing), but they run as fim's
user, so they could read fim's block -- every API key and password it started with -- from
their parent's `/proc` entry (attack-23 #2). `hide_initial_environment` moves the variables
to the heap (the C library's `environ`, which `os.environ` and every child's environment
are built from, keeps them) and zeroes the block. The values still live in fim's heap, and
where Yama does not restrict ptrace (Debian, RHEL and most containers), a process of the
same user reads `/proc/<fim>/mem` (attack-25 #1): `not_dumpable` keeps every process but
root out of it (no core dumps of fim; `gdb -p`/`py-spy` on it need root).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from pathlib import Path


def hide_initial_environment(keep: bool = True) -> None:
    """Zero the block the process started with; with `keep`, first copy each variable to
    the heap (`os.putenv`) so the process and its children still have them. Linux only;
    elsewhere nothing (no `/proc/<pid>/environ` to read)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
    except (OSError, IndexError, ValueError):
        return
    if not 0 < start < end:
        return
    if keep:  # setenv copies the text: nothing points into the block afterwards
        try:
            for name, value in os.environ.items():
                os.putenv(name, value)
        except (ValueError, OSError):  # a name setenv refuses ("=x"): its entry stays there
            return
    ctypes.memset(start, 0, end - start)


PR_SET_DUMPABLE = 4


def not_dumpable() -> None:
    """Mark this process not dumpable (`prctl(PR_SET_DUMPABLE, 0)`): the kernel then lets
    no process of the same user read its memory, its `/proc` entries' secrets or ptrace it.
    Each `execve` of a child resets it for the child. Linux only; elsewhere nothing."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: nothing to do
        return


def keep_inherited_descriptors() -> None:
    """Mark every descriptor this process was started with (above stderr) close-on-exec.

    Whatever started fim may leave descriptors open (a CI runner's pipe, a supervisor's
    log file or socket). fim opens its own close-on-exec, and the standard library's
    `subprocess` closes the rest in the child, but uvloop (`fim serve`'s loop) spawns
    through libuv, which does not: a sandboxed `shell` call wrote to a host file through a
    descriptor `fim serve` had inherited (attack-42 F1). fim still uses them itself; only
    its children no longer get them. Linux only (`/proc/self/fd`); elsewhere nothing."""
    try:
        descriptors = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in descriptors:
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
                os.set_inheritable(fd, False)


def hide_from_children() -> None:
    """All three, at the start of a process that will start children (`fim` itself, a
    `--workers` child): the start-up block zeroed, the memory closed to the same user, the
    inherited descriptors kept from them."""
    hide_initial_environment()
    not_dumpable()
    keep_inherited_descriptors()
