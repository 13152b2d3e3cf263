"""The user namespaces a sandbox runs in when fim is root but may not create namespaces
itself (a container without CAP_SYS_ADMIN): made by fim for each call, never by bwrap.

bwrap's own `--unshare-user`, started by root, maps the sandbox's uid onto the uid bwrap
runs as, host root: the sandbox wrote host sysctls (`core_pattern`: a host escape) and
RLIMIT_NPROC did not bind it (attack64 F1, F2). Started as host `nobody` instead, bwrap
could not reach what it binds (the sandbox folder is fim's alone, 0700; an interpreter may
live under /root). So a helper fim starts makes two namespaces, one inside the other:

- `outer`: uid and gid 0 -> host 0 and 65534 -> host 65534. bwrap joins it (`--userns`)
  and sets the sandbox up as its root: it reaches fim's files, and mounts in namespaces
  that this one owns (its capabilities stop at them);
- `inner`, a child of `outer`: only 65534 -> host 65534. bwrap enters it once the sandbox
  is set up, before the launcher starts (`--userns2`); the launcher becomes 65534 there and
  drops every capability (fim/tools/sandbox/command.py). Host root is not mapped in the
  namespace the command runs in, and the launcher refuses to start a command whose uid is
  root outside it.

Each call gets its own pair: RLIMIT_NPROC counts per user and user namespace, so it binds
each call's tasks, threads included, at `max_processes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys

NOBODY = 65534
_NEWUSER = 0x10000000  # CLONE_NEWUSER

# Runs as root in a child of fim (`-I -S`: no site, no user paths): makes `outer`, waits
# until fim has written its maps, then forks a child that makes `inner`, writes that one's
# maps (as root of `outer`) and prints its pid; both hold their namespace until fim closes
# the helper's stdin (fim has opened them by then).
_HELPER = f"""\
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def unshare():
    if libc.unshare({_NEWUSER}) != 0:
        sys.exit("cannot create a user namespace: " + os.strerror(ctypes.get_errno()))
unshare()
print("outer", flush=True)
if sys.stdin.readline() != "mapped\\n":
    sys.exit(1)
ready_r, ready_w = os.pipe()
hold_r, hold_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(ready_r)
    os.close(hold_w)
    unshare()
    os.write(ready_w, b".")
    os.read(hold_r, 1)
    os._exit(0)
os.close(ready_w)
os.close(hold_r)
if os.read(ready_r, 1) != b".":
    sys.exit(1)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{{pid}}/{{name}}", "w") as handle:
        handle.write("{NOBODY} {NOBODY} 1\\n")
print(pid, flush=True)
sys.stdin.read()
os.close(hold_w)
os.waitpid(pid, 0)
"""
OUTER_MAP = f"0 0 1\n{NOBODY} {NOBODY} 1\n"


def make() -> tuple[int, int]:
    """Descriptors of a new `outer` and `inner` namespace (blocking: it starts a helper;
    the caller closes them). OSError, saying why, when the kernel refuses them."""
    helper = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _HELPER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={},
    )
    assert helper.stdin is not None and helper.stdout is not None and helper.stderr is not None
    opened: list[int] = []
    try:
        if helper.stdout.readline() != b"outer\n":
            raise OSError("the helper stopped")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{helper.pid}/{name}", "w") as handle:
                handle.write(OUTER_MAP)
        helper.stdin.write(b"mapped\n")
        helper.stdin.flush()
        inner = int(helper.stdout.readline() or b"0")
        if inner <= 0:
            raise OSError("the helper stopped")
        for pid in (helper.pid, inner):
            opened.append(os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
        return opened[0], opened[1]
    except (OSError, ValueError) as exc:
        for fd in opened:
            os.close(fd)
        helper.kill()
        said = helper.stderr.read().decode("utf-8", errors="replace").strip().splitlines()
        why = said[-1] if said else str(exc)
        raise OSError(f"cannot create the sandbox's user namespaces: {why}") from None
    finally:
        with contextlib.suppress(OSError):
            helper.stdin.close()
        helper.wait()
        helper.stdout.close()
        helper.stderr.close()


async def made() -> tuple[int, int]:
    """`make` in a thread, with no descriptor left open when the call is cancelled while
    the thread runs (it cannot be stopped: what it makes is closed when it is done)."""
    making = asyncio.ensure_future(asyncio.to_thread(make))
    try:
        return await asyncio.shield(making)
    except asyncio.CancelledError:
        making.add_done_callback(_close)
        raise


def _close(done: asyncio.Future[tuple[int, int]]) -> None:
    if not done.cancelled() and done.exception() is None:
        for fd in done.result():
            os.close(fd)
