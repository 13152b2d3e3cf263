"""The OS sandbox `python_exec` and `shell` run in: bubblewrap, one package, one policy.

Every command a model writes is hostile until proven otherwise (prompt injection), so it
runs under `bwrap` (the sandbox Claude Code uses on Linux) with:

- new PID, network, IPC, UTS (and cgroup, when possible) namespaces, `--new-session` (no
  TIOCSTI into our terminal) and `--die-with-parent`;
- a fresh `/proc` of its own PID namespace, so `/proc/<ppid>/environ` of the fim server and
  every other host process is unreachable;
- an unprivileged user: uid/gid 65534. When fim runs as a normal user, bwrap maps 65534 in a
  new user namespace onto that user. When fim runs as root, a user namespace would map the
  sandbox onto host root (and root ignores RLIMIT_NPROC), so bwrap keeps the host user
  namespace and our launcher drops to the real host uid/gid 65534 (`nobody`) before the
  command starts; no capability survives (`--cap-drop ALL` but setuid/setgid, then setresuid).
  Where root may not create namespaces itself (a container without CAP_SYS_ADMIN), bwrap's
  own user namespace would be that one: fim makes the call's namespaces instead
  (fim/tools/sandbox/userns.py), bwrap sets the sandbox up as root of the outer one and the
  launcher becomes host uid 65534 in the inner one, which maps nothing else (attack64 F1:
  the sandbox had written host sysctls). RLIMIT_NPROC binds there per call, threads
  included; the watchdog also counts the tree's tasks, a belt. In every mode /proc/sys is
  read-only, and the launcher refuses to run a command that is root, in its namespace or
  outside it, or holds a capability;
- read-only binds of /usr (and /bin, /lib*, /sbin as on the host), the Python fim runs on
  (`sys.prefix`, `sys.base_prefix`), and only the /etc files a program needs to start
  (ld.so.cache, stub passwd/group/hosts, Debian's /etc/alternatives links that `awk` or
  `which` go through; never /etc/shadow);
- the project only where the agent opts in (`sandbox: {project: read}`): read-only at
  /project, the working directory, with fim's state in it hidden (fim/tools/sandbox/project.py);
- `/dev` minimal (null, zero, random, urandom, tty) and read-only, `/dev/shm` and `/tmp`
  tmpfs capped at `tmp_mb` each, and ONE writable directory: the sandbox's `scratch/`, at
  the same path as on the host (mounted nosuid), in a sandbox folder that is fim's user's
  alone (0700) wherever fim.yaml puts it;
- a seccomp filter refusing the kernel keyring calls (fim/tools/sandbox/seccomp.py: in root
  mode the keyring of host `nobody` outlives every call), new namespaces (`unshare`,
  `setns`, `clone` with a `CLONE_NEW*` flag), io_uring and the other calls Docker refuses;
- an empty environment but PATH, HOME, TMPDIR, LANG and what the agent declares under
  `sandbox.env`. bwrap's options, these values included, reach it on a descriptor
  (`--args FD`), never on a command line: /proc/<pid>/cmdline is readable by every local
  user;
- at most `MAX_CONCURRENT` sandboxes at once per process (more calls wait), so the limits
  below bound what a turn of many parallel calls takes from the host; one API key's runs
  hold at most half of them (`fim.locks.share`), so another key's call never waits behind
  all of one tenant's;
- no network (the network namespace has only a loopback of its own). An agent with
  `sandbox: {network: true}` gets HTTP(S) through fim/tools/egress.py: a proxy outside the
  sandbox, reached through a Unix socket, that applies web_fetch's guard (no loopback,
  private, link-local or reserved addresses unless fim.yaml's `web_fetch` allows them) and
  connects to the address it checked. Nothing else leaves: no UDP, no DNS, no direct TCP.

Limits (see `Limits`): CPU seconds (RLIMIT_CPU), memory per process (RLIMIT_AS) AND for the
whole tree (a watchdog sums the resident memory of every process of the sandbox each 50 ms
and kills the tree above the limit; under it, where the host gives fim a writable memory
cgroup, the kernel caps the tree at `memory_mb` plus a small slack in a cgroup of the call's
own: see below), processes and threads (RLIMIT_NPROC, counted per user inside the sandbox's
user namespace; with root's privileged bwrap per host uid 65534, so concurrent sandboxes
share it), file size
(RLIMIT_FSIZE), disk (the watchdog also reads the free space of the disk holding scratch/
and kills the tree once one call took more than `disk_mb` of it, or left less than
`disk_reserve_mb`, or fewer than `inode_reserve_percent` of its inodes: RLIMIT_FSIZE caps
one file, not a loop writing many; and counts the sandbox folder, where files stay between
calls, against `folder_mb` and `MAX_FOLDER_FILES` entries, again each time the disk lost
that much space or a quarter of that many inodes: empty files take no bytes), no core
files, a size-capped /tmp, and an output cap (only the first bytes of stdout/stderr are
kept, the rest is read and dropped so the child never blocks).

Memory the kernel holds for the tree outside every process's resident set (memfd files
filled with write(), even one sent over a socket and closed; detached SysV shared memory)
is in no /proc view (attack-14 #1). The kernel charges it to the memory cgroup of the
process that faulted it in, so each call runs in a memory cgroup of its own
(fim/tools/sandbox/cgroup.py: v1, or a delegated v2 subtree), entered before bwrap starts
and deleted, with anything left in it, before the call returns; a kernel OOM kill there
ends the whole tree and reads as the watchdog's memory limit. Where the host has no
writable memory cgroup (not root, no delegation), the watchdog is the only layer and fim
logs that once: such memory is then bounded only by the call's deadline (the IPC namespace
is the sandbox's own, so it ends with the call).

The deadline kills the whole tree: the PID namespace's init (bwrap's reaper) is killed, and
the kernel kills every process of the namespace with it, `setsid` double forks included;
the call returns only once they are gone. A normal exit does the same: when the command
ends, its namespace ends.

This module is the sandbox's interface (`run`, `Limits`, `Outcome`, `observation`,
`unavailable`, `warnings_for`: the tools use them as `sandbox.X`) and decides what holds for
every call of the process: whether bwrap is there and can start (probed once per process:
a bwrap refused user namespaces, as on Ubuntu 24.04, is `unavailable()` like a missing one,
so `fim validate` warns and no call runs), which user mode root gets, how many sandboxes
run at once. The parts: `command` (the bwrap command line and the launcher),
`limits`, `watchdog` (the tree seen from the host), `process` (one command from spawn to
exit), `output` (captured output and the model's view of it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fim import private
from fim.locks import share, slots
from fim.tools.sandbox import userns
from fim.tools.sandbox.command import NOBODY, check_env, tmpfs
from fim.tools.sandbox.limits import Limits
from fim.tools.sandbox.output import Outcome, observation, setup_hint
from fim.tools.sandbox.process import execute
from fim.tools.sandbox.project import MOUNT as PROJECT_MOUNT
from fim.tools.sandbox.project import ProjectView
from fim.tools.sandbox.project import for_call as project_for
from fim.tools.sandbox.project import of_run as project_of_run
from fim.tools.sandbox.project import view as project_view

if TYPE_CHECKING:
    from fim.config.schema import WebFetchSettings

INSTALL_HINT = (
    "the sandbox program bubblewrap (bwrap) is not installed; "
    "install it with `apt-get install bubblewrap` (Debian/Ubuntu) to use python_exec and shell"
)
SANDBOX_TOOLS = frozenset({"python_exec", "shell"})
log = logging.getLogger("fim.sandbox")


def bwrap_path() -> str | None:
    """The bubblewrap binary, or None when it is not installed."""
    return shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None
    )


def unavailable() -> str | None:
    """One line saying why sandboxed tools cannot run here, or None when they can.

    Blocking on its first call for a bwrap (it starts bwrap once, `_probe`): from async code
    use `refused()`. A bwrap that is installed but cannot start (user namespaces refused:
    Ubuntu 24.04's AppArmor, Docker's seccomp profile) is caught here, so `fim validate`
    warns about it as about a missing bwrap, and a run says what to do, not only the model.
    """
    if sys.platform != "linux":
        return "python_exec and shell need Linux (bubblewrap namespaces)"
    bwrap = bwrap_path()
    if bwrap is None:
        return INSTALL_HINT
    _, error = _probe(bwrap)
    if error is None:
        return None
    return f"the sandbox could not start: {error} ({setup_hint(error)})"


async def refused() -> str | None:
    """`unavailable()` for the tools, off the event loop (its first call starts bwrap).
    A refusal is also logged, once per reason and process, for the operator: the tool's
    error reaches only the model, and a run that only the model knows failed ends `ok`."""
    why = await asyncio.to_thread(unavailable)
    if why is not None and why not in _TOLD:
        _TOLD.add(why)
        log.warning("python_exec and shell cannot run here: %s", why)
    return why


_TOLD: set[str] = set()


def notes() -> list[str]:
    """Facts about this host's sandbox an operator may want (`fim validate -v`), which are
    not problems: where calls get no memory cgroup, the watchdog alone caps memory."""
    # deferred: cgroup discovery reads /proc and cgroupfs, only when asked
    from fim.tools.sandbox.cgroup import NO_CGROUP_ACTION, why_not

    why = why_not()
    if why is None:
        return []
    return [f"sandbox memory_mb is enforced by the watchdog alone: {why} ({NO_CGROUP_ACTION})"]


def warnings_for(tools: Sequence[str]) -> list[str]:
    """`fim validate` warnings for an agent listing these tools (none when the sandbox can
    start here)."""
    listed = sorted(SANDBOX_TOOLS.intersection(tools))
    if not listed:
        return []
    why = unavailable()
    if why is None:
        return []
    return [f"{', '.join(listed)} will refuse to run on this machine: {why}"]


async def run(
    argv: Sequence[str],
    *,
    scratch: Path,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    limits: Limits | None = None,
    network: WebFetchSettings | None = None,
    read_only: Sequence[Path] = (),
    folder: Path | None = None,
    project: ProjectView | None = None,
) -> Outcome:
    """Run `argv` in the sandbox with `scratch` as its only writable folder. With `network`
    (web_fetch's settings), HTTP(S) goes out through the guarded egress proxy; without it
    there is no network at all. `folder` (the sandbox folder `scratch` is in, where files
    stay between calls) may hold at most `limits.folder_mb`. `project` (`project_view`) is
    bound read-only at /project, fim's state in it hidden, and is the working directory.

    Raises RuntimeError with `unavailable()`'s line when bubblewrap is missing. Cancelling the
    call (the engine's tool timeout) kills the tree before re-raising.
    """
    why = await asyncio.to_thread(unavailable)
    if why is not None:  # fail closed: nothing runs outside a sandbox that cannot start
        raise RuntimeError(why)
    bwrap = bwrap_path() or "bwrap"
    limits = limits or Limits()
    declared = dict(env or {})
    check_env(declared)
    as_root = os.geteuid() == 0 and await _privileged()
    # the sandbox is host uid 65534 whenever fim is root, in either mode
    owner = NOBODY if os.geteuid() == 0 else None
    await asyncio.to_thread(_prepare, scratch, owner is not None)
    async with share("sandbox", MAX_CONCURRENT), slots("sandbox", MAX_CONCURRENT):
        if network is None:
            return await execute(
                argv, scratch, stdin, declared, limits, as_root, None, read_only,
                bwrap=bwrap, folder=folder, project=project,
            )  # fmt: skip
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.tools.egress import Egress

        async with Egress(network, owner=owner) as egress:
            return await execute(
                argv,
                scratch,
                stdin,
                declared,
                limits,
                as_root,
                egress.directory,
                read_only,
                bwrap=bwrap,
                folder=folder,
                project=project,
            )


MAX_CONCURRENT = max(2, min(8, os.cpu_count() or 2))
"""Sandboxed commands one process runs at once; more wait for a slot. Each tree may use
`memory_mb` and `max_processes`: without a cap, one model turn of many parallel `shell`
calls multiplied that by the number of calls (the memory watchdog sees one tree)."""

_PRIVILEGED: bool | None = None
"""Overrides the probe's mode when set (tests force the user-namespace mode as root)."""

_PROBED: dict[str, tuple[bool, str | None, float]] = {}
"""Per bwrap program: whether root may run it privileged, why it cannot start at all (None:
it can), and when that was found. One probe per program and process while bwrap starts; a
failure is probed again after `RETRY_AFTER` seconds (a process limit reached for a moment
must not leave a long-running server without its sandbox tools)."""
_PROBING = threading.Lock()
PROBE_TIMEOUT = 30.0
RETRY_AFTER = 60.0
_clock = time.monotonic


async def _privileged() -> bool:
    """Whether bwrap, run by root, may create namespaces itself (so the launcher can become
    the real host user 65534). Asked once per process; a container without CAP_SYS_ADMIN
    says no and the user-namespace mode is used instead."""
    if _PRIVILEGED is not None:
        return _PRIVILEGED
    privileged, _ = await asyncio.to_thread(_probe, bwrap_path() or "bwrap")
    return privileged


def _probe(bwrap: str) -> tuple[bool, str | None]:
    """Start `bwrap` the way calls will (blocking; once per program and process, a failure
    again after `RETRY_AFTER`): as root first privileged, then, as every other user and
    where root may not, in a user namespace with the namespaces every call gets. Whether
    the privileged mode works, and the first line bwrap printed when no mode does."""
    with _PROBING:
        found = _PROBED.get(bwrap)
        if found is None or (found[1] is not None and _clock() - found[2] >= RETRY_AFTER):
            privileged = os.geteuid() == 0 and _starts(bwrap, _PRIVILEGED_PROBE) is None
            error = None if privileged else _user_starts(bwrap)
            found = _PROBED[bwrap] = (privileged, error, _clock())
        return found[0], found[1]


# both mount a /tmp as calls do (`tmpfs`): a bwrap older than 0.7 (no `--size`) fails here
_PROBE_TMP = tuple(tmpfs("/tmp", 1 << 20))
_PRIVILEGED_PROBE = ("--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", *_PROBE_TMP)
_USER_PROBE = (
    "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
    "--ro-bind", "/", "/", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
    "--dev", "/dev", *_PROBE_TMP,
)  # fmt: skip


def _user_starts(bwrap: str) -> str | None:
    """`_starts` in the user-namespace mode: as root, in namespaces fim made
    (fim/tools/sandbox/userns.py) as calls will be, else in bwrap's own."""
    if os.geteuid() != 0:
        user = ("--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY))
        return _starts(bwrap, (*user, *_USER_PROBE))
    try:
        outer, inner = userns.make()
    except OSError as exc:
        return str(exc)
    try:
        joined = ("--userns", str(outer), "--userns2", str(inner))
        return _starts(bwrap, (*joined, *_USER_PROBE), (outer, inner))
    finally:
        os.close(outer)
        os.close(inner)


def _starts(bwrap: str, options: Sequence[str], fds: Sequence[int] = ()) -> str | None:
    """None when `bwrap OPTIONS -- true` succeeds, else what went wrong, in one line."""
    try:
        done = subprocess.run(
            [bwrap, *options, "--", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
            timeout=PROBE_TIMEOUT,
            check=False,
            pass_fds=tuple(fds),
        )
    except subprocess.TimeoutExpired:
        return f"bwrap did not start a sandbox within {PROBE_TIMEOUT:g}s"
    except OSError as exc:
        return f"cannot run {bwrap}: {exc.strerror}"
    if done.returncode == 0:
        return None
    said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
    return said[0] if said else f"bwrap exited with code {done.returncode}"


def _prepare(scratch: Path, as_root: bool) -> None:
    """Create the scratch folder; when fim is root (either mode) hand it to the sandbox
    user, host uid 65534, the only one that writes there (fim itself, as root, can still
    read and write it).

    The sandbox folder it is in (and, for a key's folder, `<sandbox>-keys`) is made, or
    narrowed to, fim's user's alone wherever fim.yaml puts it (attack-25 #2): the program
    owns `scratch/` and may leave a setuid file there (when fim is not root its uid is fim's
    user on the host), so no other user may reach it. bwrap
    binds `scratch` alone, at the same path, under folders of its own: the host folders'
    modes do not matter to the sandbox, and it cannot widen them."""
    private.sandbox_folder(scratch.parent)
    scratch.mkdir(exist_ok=True)
    if as_root and os.stat(scratch).st_uid != NOBODY:
        os.chown(scratch, NOBODY, NOBODY)


__all__ = [
    "INSTALL_HINT",
    "MAX_CONCURRENT",
    "PROJECT_MOUNT",
    "SANDBOX_TOOLS",
    "Limits",
    "Outcome",
    "ProjectView",
    "bwrap_path",
    "notes",
    "observation",
    "project_for",
    "project_of_run",
    "project_view",
    "refused",
    "run",
    "unavailable",
    "warnings_for",
]
