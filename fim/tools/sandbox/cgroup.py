"""A memory cgroup for each sandboxed call: the kernel's own cap on the whole tree's memory.

Its own module because this is the second, kernel-enforced layer under the watchdog
(fim/tools/sandbox/watchdog.py). The watchdog sums what /proc shows (resident sets), and
memory the kernel holds for a tree outside every resident set escaped it: pages of a memfd
filled with write() (even one sent over a socket and closed) and detached SysV shared
memory (attack-14 #1). A memory cgroup charges every page to the cgroup of the process
that faulted it in, shmem, memfd and SysV included, so the kernel refuses the tree more
than its limit and OOM-kills in it.

The files under /sys/fs/cgroup are the kernel's interface; this is a thin helper over
them (the PyPI packages, cgroupspy, cgroups, cgroupy, speak cgroup v1 only and know
nothing of v2 delegation). Per call: `create` makes `fim-sandbox-<pid>-<n>` with the
limit, `join_argv` starts bwrap through `/bin/sh`, which writes its own pid into the
cgroup and only then execs bwrap (so no process of the sandbox ever runs outside it),
`oom_kills` tells the watchdog the kernel killed for memory, and `remove` kills what is
left and deletes the cgroup.

Where the cgroup goes, found once per process (`base`):
- cgroup v1 (a `memory` hierarchy): a child of the process's own memory cgroup, which must
  be writable (root, or a delegated folder);
- cgroup v2: a child of the process's own cgroup, which must be writable with the
  `memory` controller available. A v2 cgroup with controllers enabled for its children
  may hold no process itself, so fim first moves itself into a leaf `fim-supervisor`
  beside the calls, then enables `+memory`; when other processes share its cgroup that
  fails, fim moves back and keeps the watchdog alone.
Where neither works (not root, no delegation, read-only cgroupfs), the watchdog stays the
only layer, and fim logs why once.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("fim.sandbox")

PREFIX = "fim-sandbox-"
LEAF = "fim-supervisor"
NO_CGROUP_ACTION = (
    "memory is still capped per process and per call by the watchdog; for the kernel's cap "
    "give fim a delegated cgroup: a systemd service with `Delegate=yes`, or "
    "`systemd-run --user -p Delegate=yes fim ...`; see docs/security.md"
)
"""What an operator can do about it (the info line and `fim validate -v` say it)."""
JOIN_ERROR = "fim sandbox: cannot join the memory cgroup"
"""What the shell prints (and the call reports as a setup error) when it cannot enter the
cgroup: it then never starts bwrap, so no command runs unbounded."""
SHELL = "/bin/sh"
# "$1" is cgroup.procs; the rest is bwrap's command line. exec keeps the pid just written.
_JOIN = (
    f'{{ echo $$ > "$1"; }} 2>/dev/null || {{ echo "{JOIN_ERROR} $1" >&2; exit 1; }}; '
    'shift; exec "$@"'
)
_numbers = itertools.count(1)


@dataclass(frozen=True)
class Base:
    """The cgroup the calls' cgroups are made in, and its hierarchy's version."""

    path: Path
    version: int


@dataclass(frozen=True)
class MemoryCgroup:
    """One call's cgroup."""

    path: Path
    version: int

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def oom_kills(self) -> int:
        """Processes the kernel killed in this cgroup for memory (0 once it is gone)."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError, ValueError):
            return [int(p) for p in self.procs.read_text().split()]
        return []

    def remove(self, within: float = 5.0) -> bool:
        """Kill every process left in the cgroup, then delete it (retried while the kernel
        reaps them, at most `within` seconds; blocking: call it in a thread). False when it
        is still there."""
        until = time.monotonic() + within
        while True:
            kill = self.path / "cgroup.kill"
            if self.version == 2 and kill.exists():
                with contextlib.suppress(OSError):
                    kill.write_text("1")
            else:
                for pid in self.pids():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > until:
                    log.warning("could not remove the sandbox's memory cgroup %s", self.path)
                    return False
                time.sleep(0.005)


def join_argv(group: MemoryCgroup, args: list[str]) -> list[str]:
    """`args` started through a shell that first enters `group` (then execs `args[0]`)."""
    return [SHELL, "-c", _JOIN, "sh", str(group.procs), *args]


def create(base: Base, limit_bytes: int) -> MemoryCgroup | None:
    """A new cgroup under `base` holding its processes to `limit_bytes` of memory, swap
    included (none may be used). None (logged) when the kernel refuses it."""
    path = base.path / f"{PREFIX}{os.getpid()}-{next(_numbers)}"
    group = MemoryCgroup(path, base.version)
    try:
        path.mkdir()
    except OSError as exc:
        log.warning("cannot create the sandbox's memory cgroup %s: %s", path, exc.strerror)
        return None
    try:
        if base.version == 1:
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            swap = path / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(limit_bytes))
        else:
            (path / "memory.max").write_text(str(limit_bytes))
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if (path / name).exists():
                    (path / name).write_text(value)
    except OSError as exc:
        log.warning("cannot set the limit of the memory cgroup %s: %s", path, exc.strerror)
        group.remove(within=0.5)
        return None
    return group


_FOUND: tuple[Base | None, str] | None = None
_FINDING = threading.Lock()  # calls start in threads: one discovery (and one v2 move)


def base() -> Base | None:
    """Where this process makes its calls' cgroups, or None (logged once, with why)."""
    global _FOUND
    with _FINDING:
        if _FOUND is None:
            try:
                _FOUND = _discover()
            except OSError as exc:
                _FOUND = (None, f"cannot read the process's cgroup ({exc})")
            found, why = _FOUND
            if found is None:
                # info, not a warning: nearly every laptop (cgroup v2, no delegation) is
                # here, and a line on every `fim run` looked like a failure; `fim serve`
                # logs it at its default level, `fim validate -v` shows it (`notes()`)
                log.info(
                    "sandbox memory_mb is enforced by the watchdog alone (memory the kernel "
                    "holds outside the processes, memfd and SysV shared memory, is not "
                    "capped): %s (%s)",
                    why,
                    NO_CGROUP_ACTION,
                )
            else:
                _sweep(found)
        return _FOUND[0]


def why_not() -> str | None:
    """Why calls get no memory cgroup here, or None when they do."""
    base()
    assert _FOUND is not None
    return _FOUND[1] if _FOUND[0] is None else None


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root, mount point, fstype, super options) of every cgroup filesystem."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            options = set(rest[2].split(","))
            found.append((fields[3], Path(fields[4].replace("\\040", " ")), rest[0], options))
    return found


def _inside(mount: Path, root: str, path: str) -> Path:
    relative = path[len(root) :] if root != "/" and path.startswith(root) else path
    return mount / relative.lstrip("/")


def _discover() -> tuple[Base | None, str]:
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    mounts = _mounts()
    if "memory" in own:
        for root, mount, kind, options in mounts:
            if kind == "cgroup" and "memory" in options:
                parent = _inside(mount, root, own["memory"])
                if not os.access(parent, os.W_OK):
                    return None, f"the memory cgroup {parent} is not writable by this user"
                return Base(parent, 1), ""
        return None, "the cgroup v1 memory hierarchy is not mounted"
    if "" not in own:
        return None, "the process is in no memory cgroup"
    v2 = [(root, mount) for root, mount, kind, _ in mounts if kind == "cgroup2"]
    if not v2:
        return None, "no cgroup2 filesystem is mounted"
    here = _inside(v2[0][1], v2[0][0], own[""])
    return _delegated(here)


def _controllers(path: Path, name: str) -> set[str]:
    with contextlib.suppress(OSError):
        return set((path / name).read_text().split())
    return set()


def _delegated(here: Path) -> tuple[Base | None, str]:
    """A v2 cgroup whose children may have a memory limit: `here`'s parent when fim is in
    its own `LEAF` already, else `here` once fim moved into a `LEAF` child of it."""
    if here.name == LEAF and "memory" in _controllers(here.parent, "cgroup.subtree_control"):
        return Base(here.parent, 2), ""
    if "memory" not in _controllers(here, "cgroup.controllers"):
        return None, f"the memory controller is not enabled for the cgroup {here}"
    if "memory" in _controllers(here, "cgroup.subtree_control"):  # the root cgroup
        return Base(here, 2), ""
    if not os.access(here / "cgroup.subtree_control", os.W_OK):
        return None, f"the cgroup {here} is not delegated to this user (not writable)"
    leaf = here / LEAF
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        return None, f"cannot move fim into {leaf}: {exc.strerror}"
    try:
        (here / "cgroup.subtree_control").write_text("+memory")
    except OSError as exc:
        with contextlib.suppress(OSError):
            (here / "cgroup.procs").write_text(str(os.getpid()))
            leaf.rmdir()
        return None, f"cannot enable the memory controller in {here} ({exc.strerror}: "
        "other processes share its cgroup; run fim in a cgroup of its own)"
    return Base(here, 2), ""


def _sweep(found: Base) -> None:
    """Delete the empty cgroups of fim processes that are gone (one killed mid-call)."""
    with contextlib.suppress(OSError):
        for entry in found.path.iterdir():
            owner = entry.name.removeprefix(PREFIX).split("-")[0]
            if entry.name.startswith(PREFIX) and owner.isdigit() and not _running(int(owner)):
                with contextlib.suppress(OSError):
                    entry.rmdir()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
