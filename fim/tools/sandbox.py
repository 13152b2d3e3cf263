"""The OS sandbox `python_exec` and `shell` run in: bubblewrap, one module, one policy.

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
  Where root may not create namespaces itself (a container without CAP_SYS_ADMIN), the
  user-namespace mode is used as root too; RLIMIT_NPROC does not bind host root, so there the
  watchdog also counts the processes and kills the tree above the limit;
- read-only binds of /usr (and /bin, /lib*, /sbin as on the host), the Python fim runs on
  (`sys.prefix`, `sys.base_prefix`), and only the /etc files a program needs to start
  (ld.so.cache, stub passwd/group/hosts; never /etc/shadow);
- `/dev` minimal (null, zero, random, urandom, tty), a size-capped tmpfs `/tmp`, and ONE
  writable directory: the sandbox's `scratch/`, at the same path as on the host;
- an empty environment but PATH, HOME, TMPDIR, LANG and what the agent declares under
  `sandbox.env`;
- at most `MAX_CONCURRENT` sandboxes at once per process (more calls wait), so the limits
  below bound what a turn of many parallel calls takes from the host;
- no network (the network namespace has only a loopback of its own). An agent with
  `sandbox: {network: true}` gets HTTP(S) through fim/tools/egress.py: a proxy outside the
  sandbox, reached through a Unix socket, that applies web_fetch's guard (no loopback,
  private, link-local or reserved addresses unless fim.yaml's `web_fetch` allows them) and
  connects to the address it checked. Nothing else leaves: no UDP, no DNS, no direct TCP.

Limits (see `Limits`): CPU seconds (RLIMIT_CPU), memory per process (RLIMIT_AS) AND for the
whole tree (a watchdog sums the resident memory of every process of the sandbox each 50 ms
and kills the tree above the limit: cgroups are not used, they need a delegated subtree that
fim cannot assume), processes (RLIMIT_NPROC, counted per user inside the sandbox's user
namespace; in root mode per host uid 65534, so concurrent sandboxes share it), file size
(RLIMIT_FSIZE), disk (the watchdog also reads the free space of the disk holding scratch/
and kills the tree once one call took more than `disk_mb` of it, or left less than
`disk_reserve_mb`: RLIMIT_FSIZE caps one file, not a loop writing many), no core files, a
size-capped /tmp, and an output cap (only the first bytes of
stdout/stderr are kept, the rest is read and dropped so the child never blocks).

The deadline kills the whole tree: the PID namespace's init (bwrap's reaper) is killed, and
the kernel kills every process of the namespace with it, `setsid` double forks included;
the call returns only once they are gone. A normal exit does the same: when the command
ends, its namespace ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from fim.tools.builtin._common import clip, fail
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.config.schema import WebFetchSettings

INSTALL_HINT = (
    "the sandbox program bubblewrap (bwrap) is not installed; "
    "install it with `apt-get install bubblewrap` (Debian/Ubuntu) to use python_exec and shell"
)
SANDBOX_TOOLS = frozenset({"python_exec", "shell"})
NOBODY = 65534
RESERVED_ENV = frozenset({"PATH", "HOME", "TMPDIR"})
EGRESS_DIR = "/run/fim-egress"
WATCH_INTERVAL = 0.05
_CHUNK = 65_536
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# Runs inside the sandbox, before the command: sets the limits and, in root mode, becomes
# the real host user `nobody`. Kept tiny and import-light (`-I -S`: no site, no user paths).
_LAUNCHER = """\
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), tuple(value))
if os.getuid() == 0:
    uid = cfg["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
if os.getuid() == 0 or os.geteuid() == 0:
    sys.exit("sandbox: refusing to run as root")
if cfg.get("proxy"):
    import socket, threading
    listener = socket.create_server(("127.0.0.1", cfg["proxy"]["port"]))
    if os.fork() == 0:
        def pump(a, b):
            try:
                while data := a.recv(65536):
                    b.sendall(data)
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        while True:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX)
            try:
                upstream.connect(cfg["proxy"]["socket"])
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()
    listener.close()
argv = cfg["argv"]
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.exit(f"sandbox: cannot start {argv[0]}: {exc.strerror}")
"""


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
    """Free space of the disk holding scratch/ one call may use up (files written there
    stay on the host after the call)."""
    disk_reserve_mb: int = 256
    """Free space the sandbox never takes from that disk: below it the tree is killed, so
    calls that each stay under `disk_mb` cannot add up to a full disk."""


def bwrap_path() -> str | None:
    """The bubblewrap binary, or None when it is not installed."""
    return shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None
    )


def unavailable() -> str | None:
    """One line saying why sandboxed tools cannot run here, or None when they can."""
    if sys.platform != "linux":
        return "python_exec and shell need Linux (bubblewrap namespaces)"
    if bwrap_path() is None:
        return INSTALL_HINT
    return None


def warnings_for(tools: Sequence[str]) -> list[str]:
    """`fim validate` warnings for an agent listing these tools (none when bwrap is there)."""
    listed = sorted(SANDBOX_TOOLS.intersection(tools))
    why = unavailable()
    if not listed or why is None:
        return []
    return [f"{', '.join(listed)} will refuse to run on this machine: {why}"]


def check_env(env: Mapping[str, str]) -> None:
    """Agent-declared variables: names a shell accepts, nothing that replaces the policy's."""
    for name, value in env.items():
        if not name.isidentifier() or not name.isascii():
            raise ValueError(f"'{name}' is not a valid environment variable name")
        if name in RESERVED_ENV:
            raise ValueError(f"'{name}' is set by the sandbox and cannot be declared")
        if "\x00" in value:
            raise ValueError(f"the value of '{name}' contains a NUL character")


class Capture:
    """One output pipe of the sandbox, read to EOF while keeping only the first `keep`
    bytes: a flood of output cannot fill memory and the child never blocks on a full pipe.
    What was read survives cancellation, so a killed run still shows its partial output."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()
        self.total = 0

    async def pump(self, pipe: BinaryIO) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while chunk := await reader.read(_CHUNK):
                self.total += len(chunk)
                if len(self.data) < self.keep:
                    self.data += chunk[: self.keep - len(self.data)]
        finally:
            transport.close()

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    def section(self, label: str, limit: int) -> str:
        text = self.text()
        if self.total > len(self.data) or len(text) > limit:
            return (
                f"--- {label} ---\n{text[:limit]}\n"
                f"[... {label} truncated: {self.total} bytes in total]"
            )
        return f"--- {label} ---\n{text.rstrip()}"


@dataclass
class Outcome:
    """How a sandboxed command ended. `returncode` follows the shell convention for a
    command killed by a signal (128 + signal), as bwrap's init reports it."""

    returncode: int
    stdout: Capture
    stderr: Capture
    timed_out: bool = False
    memory_exceeded: bool = False
    processes_exceeded: bool = False
    disk_exceeded: bool = False
    peak_memory: int = 0
    """Highest resident memory of the whole tree seen by the watchdog, in bytes."""
    setup_error: str | None = None
    """bwrap itself failed (no namespaces allowed here, a bad bind): the command never ran."""

    @property
    def signal(self) -> int | None:
        """The signal that ended the command (bwrap reports 128 + n; -n when bwrap itself
        was killed at the deadline)."""
        if self.returncode < 0:
            return -self.returncode
        return self.returncode - 128 if self.returncode > 128 else None


# ------------------------------------------------------------------------- the command line


def _python_roots() -> list[Path]:
    """Folders holding the interpreter fim runs on, bound read-only so `python_exec` (and a
    `python3` in `shell`) use the same Python and packages the server has. /usr is bound
    already; nested folders are covered by their parent."""
    candidates = {
        Path(os.path.realpath(sys.prefix)),
        Path(os.path.realpath(sys.base_prefix)),
        Path(os.path.realpath(sys.executable)).parent.parent,
    }
    roots: list[Path] = []
    for root in sorted(candidates, key=lambda p: len(p.parts)):
        if len(root.parts) < 2 or root.parts[1] == "usr":
            continue
        if not any(root == r or r in root.parents for r in roots):
            roots.append(root)
    return roots


def _parents(path: Path) -> list[Path]:
    return [p for p in reversed(path.parents) if p != Path("/")]


def _etc_files(uid: int) -> dict[str, str]:
    return {
        "/etc/passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"sandbox:x:{uid}:{uid}:sandbox:/tmp:/usr/sbin/nologin\n",
        "/etc/group": f"root:x:0:\nsandbox:x:{uid}:\n",
        "/etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
    }


def _rlimits(limits: Limits) -> dict[str, tuple[int, int]]:
    memory = limits.memory_mb * 1024 * 1024
    cpu = int(limits.timeout) + 1
    return {
        "RLIMIT_AS": (memory, memory),
        "RLIMIT_CPU": (cpu, cpu + 1),
        "RLIMIT_FSIZE": (limits.max_file_bytes, limits.max_file_bytes),
        "RLIMIT_NPROC": (limits.max_processes, limits.max_processes),
        "RLIMIT_CORE": (0, 0),
    }


def command_line(
    argv: Sequence[str],
    *,
    scratch: Path,
    env: Mapping[str, str],
    limits: Limits,
    data_fds: Mapping[str, int],
    as_root: bool,
    egress: Path | None = None,
    read_only: Sequence[Path] = (),
) -> list[str]:
    """The bwrap invocation running `argv` in `scratch`; `egress` is the folder of the
    proxy's Unix socket when the agent has `network: true` (fim/tools/egress.py);
    `read_only` folders (the agent's skill folders) appear read-only at their host path."""
    bwrap = bwrap_path() or "bwrap"
    args = [bwrap, "--die-with-parent", "--new-session"]
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    if as_root:  # see the module docstring: the launcher becomes host uid 65534
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime"):
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for dest, fd in data_fds.items():
        args += ["--perms", "0444", "--ro-bind-data", str(fd), dest]
    if egress is not None:  # HTTPS clients need the CA bundle; DNS stays out (the proxy resolves)
        for name in ("ssl", "ca-certificates", "pki"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--perms", "0755", "--dir", "/run", "--ro-bind", str(egress), EGRESS_DIR]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/usr"), Path("/tmp")}
    for root in [*_python_roots(), *read_only, scratch]:
        for parent in _parents(root):
            if parent not in made and not str(parent).startswith("/usr/"):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        made.add(root)
        kind = "--bind" if root == scratch else "--ro-bind"
        args += [kind, str(root), str(root)]
    args += ["--chdir", str(scratch), "--clearenv"]
    for name, value in _environment(scratch, env, egress is not None).items():
        args += ["--setenv", name, value]
    config: dict[str, Any] = {"argv": list(argv), "uid": NOBODY, "rlimits": _rlimits(limits)}
    if egress is not None:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.tools.egress import PORT, SOCKET_NAME

        config["proxy"] = {"port": PORT, "socket": f"{EGRESS_DIR}/{SOCKET_NAME}"}
    args += ["--", sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(config)]
    return args


def _environment(scratch: Path, declared: Mapping[str, str], proxy: bool) -> dict[str, str]:
    python_bin = str(Path(sys.executable).parent)
    base = {
        "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }
    if proxy:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.tools.egress import PORT

        url = f"http://127.0.0.1:{PORT}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            base[name] = url
    return {**base, **{k: v for k, v in declared.items() if k not in RESERVED_ENV}}


# ------------------------------------------------------------------- the process tree on host


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    return found


def tree(pid: int, limit: int = 4096) -> list[int]:
    """`pid` and its descendants. In a PID namespace every process descends from its init
    (orphans are re-parented to it), so this is the whole sandbox."""
    seen, todo = [pid], [pid]
    while todo and len(seen) < limit:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.append(child)
                todo.append(child)
    return seen


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
class _Sandbox:
    """One running bwrap and what the watchdog saw of it."""

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

    def disk_used_up(self) -> bool:
        """Whether the call took more than `disk_mb` of the scratch disk's free space, or
        left less than `disk_reserve_mb` (one statvfs: the cost does not grow with the
        number of files written)."""
        if self.scratch is None:
            return False
        try:
            free = _free_bytes(self.scratch)
        except OSError:
            return False
        if self.free_at_start is None:
            self.free_at_start = free
        mb = 1024 * 1024
        taken = self.free_at_start - free
        return taken > self.limits.disk_mb * mb or free < self.limits.disk_reserve_mb * mb

    def kill(self) -> None:
        """Kill the namespace's init (the kernel then kills every process in the namespace),
        then bwrap's outer process.

        bwrap's outer process is stopped first: a clone it is in the middle of completes and
        no new one starts, so the list of its children is whole. Without that, a kill that
        came while bwrap was creating the namespace's init found no child, and the init,
        whose `--die-with-parent` was not armed yet, outlived the kill with its command and
        no time limit (seen under load: `tests/test_sandbox.py`, a cancelled call)."""
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGSTOP)
            _stopped(pid)
        for child in _children(pid):
            _kill(child)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    async def watch(self) -> None:
        """Sum the resident memory of the tree; kill it above the limit. With `count_processes`
        (the kernel's RLIMIT_NPROC does not bind this sandbox) count its processes too."""
        cap = self.limits.memory_mb * 1024 * 1024
        while self.process.returncode is None:
            pids = tree(self.process.pid)
            self.seen.update(pids)
            used = _resident(pids[1:])  # bwrap's outer process is ours, not the sandbox's
            self.peak = max(self.peak, used)
            if used > cap:
                self.memory_exceeded = True
            # outer bwrap, its init and the command's launcher are not the program's
            if self.count_processes and len(pids) - 2 > self.limits.max_processes:
                self.processes_exceeded = True
            if self.disk_used_up():
                self.disk_exceeded = True
            if self.memory_exceeded or self.processes_exceeded or self.disk_exceeded:
                self.kill()
                return
            await asyncio.sleep(WATCH_INTERVAL)

    async def gone(self, within: float = 5.0) -> None:
        """Return once no process of the sandbox is left (bounded; a kernel that is slow
        to reap is not a reason to hang the run)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within
        self.seen.update(tree(self.process.pid))
        while any(_alive(p) for p in self.seen) and loop.time() < until:
            await asyncio.sleep(0.01)


def _free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def run(
    argv: Sequence[str],
    *,
    scratch: Path,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    limits: Limits | None = None,
    network: WebFetchSettings | None = None,
    read_only: Sequence[Path] = (),
) -> Outcome:
    """Run `argv` in the sandbox with `scratch` as its only writable folder. With `network`
    (web_fetch's settings), HTTP(S) goes out through the guarded egress proxy; without it
    there is no network at all.

    Raises RuntimeError with `unavailable()`'s line when bubblewrap is missing. Cancelling the
    call (the engine's tool timeout) kills the tree before re-raising.
    """
    why = unavailable()
    if why is not None:
        raise RuntimeError(why)
    limits = limits or Limits()
    declared = dict(env or {})
    check_env(declared)
    as_root = os.geteuid() == 0 and await _privileged()
    await asyncio.to_thread(_prepare, scratch, as_root)
    async with _slot():
        if network is None:
            return await _run(argv, scratch, stdin, declared, limits, as_root, None, read_only)
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.tools.egress import Egress

        async with Egress(network) as egress:
            return await _run(
                argv, scratch, stdin, declared, limits, as_root, egress.directory, read_only
            )


MAX_CONCURRENT = max(2, min(8, os.cpu_count() or 2))
"""Sandboxed commands one process runs at once; more wait for a slot. Each tree may use
`memory_mb` and `max_processes`: without a cap, one model turn of many parallel `shell`
calls multiplied that by the number of calls (the memory watchdog sees one tree)."""

_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _slot() -> asyncio.Semaphore:
    """The running loop's semaphore (an asyncio primitive belongs to one loop)."""
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(MAX_CONCURRENT)
    return slots


async def _run(
    argv: Sequence[str],
    scratch: Path,
    stdin: bytes,
    declared: dict[str, str],
    limits: Limits,
    as_root: bool,
    egress: Path | None,
    read_only: Sequence[Path] = (),
) -> Outcome:
    data_fds: dict[str, int] = {}
    try:
        free_at_start: int | None = _free_bytes(scratch)
    except OSError:
        free_at_start = None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        for dest, text in _etc_files(NOBODY).items():
            read_end, write_end = os.pipe()
            os.write(write_end, text.encode())  # a few bytes: fits the pipe buffer
            os.close(write_end)
            data_fds[dest] = read_end
        args = command_line(
            argv,
            scratch=scratch,
            env=declared,
            limits=limits,
            data_fds=data_fds,
            as_root=as_root,
            egress=egress,
            read_only=[p for p in read_only if p.is_dir()],
        )
        # Our own pipes, not asyncio's: Process.wait() would otherwise also wait for
        # every process that inherited stdout.
        spawn = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
                pass_fds=tuple(data_fds.values()),
            )
        )
        try:
            process = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # Cancelled while bwrap was starting: asyncio would kill only its outer process.
            # Take the handle once it exists and kill the whole tree, then re-raise.
            with contextlib.suppress(Exception):
                started = await spawn
                _Sandbox(started, limits).kill()
                await started.wait()
            raise
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, *data_fds.values()):
            os.close(fd)
    out, err = Capture(limits.keep_output), Capture(limits.keep_output)
    out_pipe, err_pipe = os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)
    pumps = asyncio.gather(out.pump(out_pipe), err.pump(err_pipe))
    box = _Sandbox(
        process,
        limits,
        count_processes=os.geteuid() == 0 and not as_root,
        scratch=scratch,
        free_at_start=free_at_start,
    )
    watcher = asyncio.ensure_future(box.watch())

    async def feed_and_wait() -> int:
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if stdin:
                process.stdin.write(stdin)
                await process.stdin.drain()
            process.stdin.close()
        return await process.wait()

    timed_out = False
    try:
        returncode = await asyncio.wait_for(feed_and_wait(), limits.timeout)
    except TimeoutError:
        timed_out = True
        box.kill()
        returncode = await process.wait()
    except BaseException:  # cancelled by the engine or the registry timeout
        box.kill()
        watcher.cancel()
        pumps.cancel()
        # Nobody awaits the cancelled pumps: retrieve their outcome, or asyncio logs
        # "exception was never retrieved" whenever they are collected.
        pumps.add_done_callback(_retrieve)
        raise
    finally:
        watcher.cancel()
    box.kill()  # normally a no-op: the namespace ended with its command
    await box.gone()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pumps, 2)
    setup_error = None
    if returncode == 1 and not out.total and err.text().startswith("bwrap: "):
        setup_error = err.text().strip().splitlines()[0]
    return Outcome(
        returncode=returncode,
        stdout=out,
        stderr=err,
        timed_out=timed_out,
        memory_exceeded=box.memory_exceeded,
        processes_exceeded=box.processes_exceeded,
        disk_exceeded=box.disk_exceeded,
        peak_memory=box.peak,
        setup_error=setup_error,
    )


def observation(
    outcome: Outcome,
    *,
    limit: float,
    memory_mb: int,
    max_output: int,
    fix: str,
    empty: str,
    what: str = "the code",
) -> str | ToolResult:
    """The model's view of a sandboxed run, shared with `shell`: exit code, then stdout and
    stderr (each cut at `max_output` characters), and what to do when it failed."""
    if outcome.setup_error is not None:
        return fail(f"the sandbox could not start: {outcome.setup_error}")
    parts = []
    if outcome.stdout.total:
        parts.append(outcome.stdout.section("stdout", max_output))
    if outcome.stderr.total:
        parts.append(outcome.stderr.section("stderr", max_output))
    body = "\n".join(parts) or empty
    if outcome.processes_exceeded:
        return fail(
            "the program started more processes than allowed and was killed. "
            "Use fewer processes or threads.\n" + body
        )
    if outcome.disk_exceeded:
        return fail(
            "the program wrote more to disk than one call may (or the disk is nearly "
            "full) and was killed. Write less, and delete files in the scratch folder "
            "you no longer need.\n" + body
        )
    if outcome.memory_exceeded:
        return fail(
            f"the processes used more than {memory_mb} MB of memory together and were "
            "killed. Use less memory (process data in chunks, fewer processes).\n" + body
        )
    if outcome.timed_out:
        return fail(
            f"{what} did not finish within {limit:g}s and was killed. "
            "Make it faster, work on less data, or pass a larger timeout.\n" + body
        )
    code = outcome.returncode
    if code != 0:
        hint = fix
        killed = {signal.SIGKILL, signal.SIGSEGV}
        if b"MemoryError" in outcome.stderr.data or outcome.signal in killed:
            hint = (
                f"The process may have hit the memory limit of {memory_mb} MB; "
                "use less memory (process data in chunks). " + hint
            )
        elif outcome.signal == signal.SIGXCPU:
            hint = "The process used up its CPU time. Make it faster. " + hint
        return ToolResult(content=f"[exit code {code}] {hint}\n{body}", is_error=True)
    return clip(f"[exit code 0]\n{body}", max_output * 2 + 200)


_PRIVILEGED: bool | None = None


async def _privileged() -> bool:
    """Whether bwrap, run by root, may create namespaces itself (so the launcher can become
    the real host user 65534). Asked once per process; a container without CAP_SYS_ADMIN
    says no and the user-namespace mode is used instead."""
    global _PRIVILEGED
    if _PRIVILEGED is None:
        probe = await asyncio.create_subprocess_exec(
            bwrap_path() or "bwrap",
            "--unshare-pid",
            "--unshare-net",
            "--ro-bind",
            "/",
            "/",
            "--",
            "true",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        _PRIVILEGED = await probe.wait() == 0
    return _PRIVILEGED


def _prepare(scratch: Path, as_root: bool) -> None:
    """Create the scratch folder; in root mode hand it to the sandbox user, the only one
    that writes there (fim itself, as root, can still read and write it)."""
    scratch.mkdir(parents=True, exist_ok=True)
    if as_root and os.stat(scratch).st_uid != NOBODY:
        os.chown(scratch, NOBODY, NOBODY)


__all__ = [
    "INSTALL_HINT",
    "SANDBOX_TOOLS",
    "Capture",
    "Limits",
    "Outcome",
    "check_env",
    "command_line",
    "observation",
    "run",
    "tree",
    "unavailable",
    "warnings_for",
]
