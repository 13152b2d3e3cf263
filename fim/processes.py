"""Which process this is, and whether a process recorded elsewhere is still alive: the one
answer for an approval's waiter, a workflow run's owner and a `fim run` in the store.

A pid means something only in its process table: the kernel's boot and, on Linux, the
pid namespace. Two containers sharing the host's network share its hostname, not its pids,
so a hostname check took a live process in another container for gone (a replica's
approvals were withdrawn; a run could be resumed twice). The start tick tells a pid
reused by a newer process from the one recorded.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import Any


def _started(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (`/proc/<pid>/stat`); None
    where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # the name, in parentheses, may hold spaces
    return int(fields[19])


@functools.cache
def process_table() -> str:
    """The process table this process's pids belong to: boot id and pid namespace on
    Linux, the hostname elsewhere (no namespaces there)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return f"host:{socket.gethostname()}"
    return f"linux:{boot}:{namespace}"


def this_process() -> dict[str, Any]:
    """This process as a record keeps it: table, pid, start tick, and the hostname (shown
    to people; never compared)."""
    pid = os.getpid()
    return {
        "table": process_table(),
        "pid": pid,
        "started": _started(pid),
        "host": socket.gethostname(),
    }


def alive(recorded: dict[str, Any] | None) -> bool | None:
    """Whether the process `recorded` (a `this_process()`) still runs: None when this
    process cannot tell (another table, or nothing recorded). A record from an older fim
    (host and pid, no table) is judged by its hostname, as it was."""
    if not isinstance(recorded, dict):
        return None
    pid = recorded.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    if "table" in recorded:
        if recorded["table"] != process_table():
            return None
    elif recorded.get("host") != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    started = recorded.get("started")
    return started is None or _started(pid) in (None, started)


__all__ = ["alive", "process_table", "this_process"]
