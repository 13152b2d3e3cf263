"""The bubblewrap command line: which namespaces, which binds, which environment, and the
launcher that sets the limits (and, as root, drops to `nobody`) before the command starts.

Its own module because it is the sandbox's policy written down as bwrap arguments: a change
to what the sandbox can see or reach is a change here and nowhere else. The package
docstring (fim/tools/sandbox/__init__.py) says what the policy is and why.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fim.tools.sandbox.limits import Limits, rlimits
from fim.tools.sandbox.project import MOUNT, ProjectView

NOBODY = 65534
RESERVED_ENV = frozenset({"PATH", "HOME", "TMPDIR"})
EGRESS_DIR = "/run/fim-egress"

# Runs inside the sandbox, before the command: sets the limits and, in root mode, becomes
# the real host user `nobody`; it refuses to start a command that is root, in its user
# namespace or outside it (its uid mapped onto 0), or holds any capability (attack64 F1).
# Kept tiny and import-light (`-I -S`: no site, no user paths).
_LAUNCHER = """\
import json, os, resource, sys
for fd in os.listdir("/proc/self/fd"):  # only 0-2 reach the command, whatever the spawn kept
    if int(fd) > 2:
        try:
            os.close(int(fd))
        except OSError:
            pass
cfg = json.loads(sys.argv[1])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), tuple(value))
if cfg["switch"] or os.getuid() == 0:
    uid = cfg["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
if cfg["switch"]:  # uid 0 is not this namespace's root: the switch kept the capabilities
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) != 0:
        sys.exit("sandbox: cannot drop its capabilities")
def outside(inside):
    with open("/proc/self/uid_map") as handle:
        for line in handle:
            first, host, count = (int(n) for n in line.split())
            if first <= inside < first + count:
                return host + inside - first
    return None
if os.getuid() == 0 or os.geteuid() == 0 or outside(os.geteuid()) in (0, None):
    sys.exit("sandbox: refusing to run as root (its user is root outside its user namespace)")
with open("/proc/self/status") as handle:
    for line in handle:
        if line.startswith(("CapPrm:", "CapEff:", "CapAmb:")) and int(line.split()[1], 16):
            sys.exit("sandbox: refusing to run with capabilities")
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


def check_env(env: Mapping[str, str]) -> None:
    """Agent-declared variables: names a shell accepts, nothing that replaces the policy's."""
    for name, value in env.items():
        if not name.isidentifier() or not name.isascii():
            raise ValueError(f"'{name}' is not a valid environment variable name")
        if name in RESERVED_ENV:
            raise ValueError(f"'{name}' is set by the sandbox and cannot be declared")
        if "\x00" in value:
            raise ValueError(f"the value of '{name}' contains a NUL character")


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


def etc_files(uid: int) -> dict[str, str]:
    """The stub /etc files bound into the sandbox (no host user names, never /etc/shadow)."""
    return {
        "/etc/passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"sandbox:x:{uid}:{uid}:sandbox:/tmp:/usr/sbin/nologin\n",
        "/etc/group": f"root:x:0:\nsandbox:x:{uid}:\n",
        "/etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
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
    bwrap: str,
    seccomp_fd: int | None = None,
    project: ProjectView | None = None,
    userns: tuple[int, int] | None = None,
) -> list[str]:
    """The bwrap invocation running `argv` in `scratch`; `egress` is the folder of the
    proxy's Unix socket when the agent has `network: true` (fim/tools/egress.py);
    `read_only` folders (the agent's skill folders) appear read-only at their host path;
    `bwrap` is the program to run (fim/tools/sandbox/__init__.py finds it); `seccomp_fd`
    holds the filter (fim/tools/sandbox/seccomp.py) bwrap loads before the command;
    `project` (`sandbox: {project: read}`) is bound read-only at /project, fim's state in
    it hidden (fim/tools/sandbox/project.py), and is the working directory; `scratch`
    stays the one writable folder (HOME); `userns`, for root where it may not create
    namespaces, holds the descriptors of the namespaces fim made for the call
    (fim/tools/sandbox/userns.py: `outer`, `inner`)."""
    args = [bwrap, "--die-with-parent", "--new-session"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    if userns is not None:  # root without CAP_SYS_ADMIN: fim/tools/sandbox/userns.py
        args += ["--userns", str(userns[0]), "--userns2", str(userns[1])]
    if as_root or userns is not None:  # see the package docstring: the launcher becomes
        # host uid 65534
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
    # alternatives: symlinks only (/usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/mawk),
    # without it awk, which, editor... are dangling links (newcomer5 #3)
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives"):
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for dest, fd in data_fds.items():
        args += ["--perms", "0444", "--ro-bind-data", str(fd), dest]
    if egress is not None:  # HTTPS clients need the CA bundle; DNS stays out (the proxy resolves)
        for name in ("ssl", "ca-certificates", "pki"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--perms", "0755", "--dir", "/run", "--ro-bind", str(egress), EGRESS_DIR]
    # bwrap's /dev is a tmpfs of half the host's memory, the sandbox user's own in a user
    # namespace (attack-25 #5): /dev/shm gets /tmp's cap and the rest of /dev is read-only
    # (its device nodes stay usable: a read-only mount does not stop writing to a device)
    tmp_size = limits.tmp_mb * 1024 * 1024
    # /proc/sys read-only whatever the sandbox's user is (attack64 F1): bwrap covers it only
    # where the caller may write to it, which a sysctl folder never allows
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    args += tmpfs("/dev/shm", tmp_size)
    args += ["--remount-ro", "/dev"]
    # /tmp is a fresh tmpfs per call (gone with the call's mount namespace), writable by the
    # sandbox user in both modes: bwrap makes a tmpfs 0755 and, in root mode, root's, so
    # without 1777 host uid 65534 could not write the TMPDIR it is given (attack-60)
    args += tmpfs("/tmp", tmp_size)
    made: set[Path] = {Path("/usr"), Path("/tmp")}
    if project is not None:  # before the host paths: one of them may lie under /project
        args += _project_mounts(project)
        made.add(Path(MOUNT))
    for root in [*_python_roots(), *read_only, scratch]:
        for parent in _parents(root):
            if parent not in made and not str(parent).startswith("/usr/"):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        made.add(root)
        kind = "--bind" if root == scratch else "--ro-bind"
        args += [kind, str(root), str(root)]
    if project is not None:  # the masks were writable for the binds above; no longer
        for relative, is_folder in project.hidden:
            if is_folder:
                args += ["--remount-ro", _inside(relative)]
    workdir = MOUNT if project is not None else str(scratch)
    args += ["--chdir", workdir, "--clearenv"]
    environment = _environment(scratch, env, egress is not None)
    if project is not None:  # git refuses a repository another uid owns (root mode)
        git = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory"}
        for name, value in {**git, "GIT_CONFIG_VALUE_0": MOUNT}.items():
            environment.setdefault(name, value)  # the agent's own sandbox.env wins
    for name, value in environment.items():
        args += ["--setenv", name, value]
    config: dict[str, Any] = {
        "argv": list(argv),
        "uid": NOBODY,
        "rlimits": rlimits(limits),
        "switch": userns is not None,
    }
    if egress is not None:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.tools.egress import PORT, SOCKET_NAME

        config["proxy"] = {"port": PORT, "socket": f"{EGRESS_DIR}/{SOCKET_NAME}"}
    args += ["--", sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(config)]
    return args


def tmpfs(dest: str, size: int) -> list[str]:
    """A tmpfs of `size` bytes at `dest` that every user may write, sticky (1777) like a
    host's /tmp. Needs bubblewrap 0.7+ (`--size`); the probe (fim/tools/sandbox/__init__.py)
    mounts one too, so an older bwrap fails it and no call runs."""
    return ["--perms", "01777", "--size", str(size), "--tmpfs", dest]


def _inside(relative: str) -> str:
    return f"{MOUNT}/{relative}" if relative else MOUNT


def _project_mounts(project: ProjectView) -> list[str]:
    """The project read-only at /project, each hidden folder an empty tmpfs (made read-only
    once the host paths are bound: `scratch` may lie in one) and each hidden file an
    unreadable node; wholly hidden, /project is an empty read-only tmpfs."""
    if ("", True) in project.hidden:
        return ["--perms", "0755", "--tmpfs", MOUNT]
    args = ["--ro-bind", str(project.root), MOUNT]
    for relative, is_folder in project.hidden:
        if is_folder:
            args += ["--perms", "0755", "--tmpfs", _inside(relative)]
        else:
            args += ["--ro-bind", "/dev/null", _inside(relative)]
    return args


def options_by_descriptor(args: Sequence[str], fd: int) -> tuple[list[str], bytes]:
    """`args` (from `command_line`) with bwrap's options moved to the descriptor `fd`:
    the short command line to start and the NUL-separated bytes to give bwrap on `fd`
    (`--args FD`). A process's command line is world-readable (/proc/<pid>/cmdline, `ps`)
    and the options hold the `--setenv` values, i.e. the agent's `sandbox.env` secrets;
    the descriptor is read by bwrap alone. The program and its arguments stay on the
    command line: bwrap reads them only from there, and the program's own command line
    shows them anyway once it starts."""
    end = list(args).index("--")
    options = b"".join(os.fsencode(arg) + b"\0" for arg in args[1:end])
    return [args[0], "--args", str(fd), *args[end:]], options


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
