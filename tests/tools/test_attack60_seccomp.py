"""Inside the sandbox, no program gets a namespace of its own, io_uring or the other calls
Docker refuses a container without capabilities; forks, threads, `sh -c`, subprocesses and
multiprocessing still work (attack-60 F3).

Every capability was dropped from the sandbox's own process, but `unshare -Ur` gave any
program in it a full capability set in a user namespace of its own (`uid=0(root)`, a tmpfs
mounted), and `io_uring_setup` returned a descriptor: the kernel's largest surface for a
local privilege escalation was open to model-written code. The seccomp filter now refuses
`unshare`, `setns`, `clone` with a `CLONE_NEW*` flag, io_uring, `bpf`, `perf_event_open`,
`userfaultfd`, `ptrace`, kexec and module loading (EPERM), and answers `clone3` with ENOSYS
(the C library falls back to `clone`, whose flags the filter reads).

Each sandbox test runs in the mode this host gives fim and, as root, in the user-namespace
mode too. Offline; skipped where bubblewrap is missing.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.sandbox import seccomp

ALLOW = 0x7FFF0000
EPERM = 0x00050000 | errno.EPERM
ENOSYS = 0x00050000 | errno.ENOSYS
X86_64, I386, AARCH64, RISCV64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0xC00000F3, 0x40000028

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
SIGCHLD = 17
# what glibc's pthread_create passes to clone (CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|
# SETTLS|PARENT_SETTID|CHILD_CLEARTID) and what fork passes (CHILD_SETTID|CHILD_CLEARTID)
THREAD_FLAGS = 0x003D0F00
FORK_FLAGS = 0x01200000 | SIGCHLD

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)


# ---------------------------------------------------------------- the filter itself


def run(arch: int, nr: int, arg0: int = 0) -> int:
    """What the filter answers a call: an interpreter of the opcodes it uses, fed a
    `struct seccomp_data` (nr, arch, instruction pointer, six arguments)."""
    code = seccomp.program()
    ops = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = ops[pc]
        if op == 0x20:  # load a word
            acc = struct.unpack("=I", data[k : k + 4])[0]
            pc += 1
        elif op == 0x15:  # jump if equal
            pc += 1 + (jt if acc == k else jf)
        elif op == 0x45:  # jump if any bit of k is set
            pc += 1 + (jt if acc & k else jf)
        else:
            assert op == 0x06  # return
            return k


# (x86_64, i386, asm-generic, arm): numbers from the kernel's tables, written again here
REFUSED = {
    "unshare": (272, 310, 97, 337),
    "setns": (308, 346, 268, 375),
    "io_uring_setup": (425, 425, 425, 425),
    "io_uring_enter": (426, 426, 426, 426),
    "io_uring_register": (427, 427, 427, 427),
    "bpf": (321, 357, 280, 386),
    "perf_event_open": (298, 336, 241, 364),
    "userfaultfd": (323, 374, 282, 388),
    "ptrace": (101, 26, 117, 26),
    "kexec_load": (246, 283, 104, 347),
    "init_module": (175, 128, 105, 128),
    "finit_module": (313, 350, 273, 379),
    "delete_module": (176, 129, 106, 129),
    "keyctl": (250, 288, 219, 311),
}
COLUMNS = {X86_64: 0, I386: 1, AARCH64: 2, RISCV64: 2, ARM: 3}
CLONE = {X86_64: 56, I386: 120, AARCH64: 220, RISCV64: 220, ARM: 120}
ALLOWED = {  # read, write, execve, wait4, mmap (or mmap2), by table
    X86_64: (0, 1, 59, 61, 9),
    I386: (3, 4, 11, 114, 192),
    AARCH64: (63, 64, 221, 260, 222),
    RISCV64: (63, 64, 221, 260, 222),
    ARM: (3, 4, 11, 114, 192),
}


@pytest.mark.parametrize("arch", list(COLUMNS), ids=["x86_64", "i386", "aarch64", "riscv", "arm"])
def test_the_filter_refuses_namespaces_io_uring_and_dockers_list_on_every_architecture(
    arch: int,
) -> None:
    for name, numbers in REFUSED.items():
        assert run(arch, numbers[COLUMNS[arch]]) == EPERM, name
    assert run(arch, 435) == ENOSYS  # clone3: the C library falls back to clone
    for nr in ALLOWED[arch]:
        assert run(arch, nr) == ALLOW, nr


@pytest.mark.parametrize("arch", list(COLUMNS), ids=["x86_64", "i386", "aarch64", "riscv", "arm"])
def test_clone_is_refused_a_new_namespace_and_allowed_everything_else(arch: int) -> None:
    nr = CLONE[arch]
    for flag in (
        CLONE_NEWUSER,
        CLONE_NEWNS,
        CLONE_NEWCGROUP,
        CLONE_NEWUTS,
        CLONE_NEWIPC,
        CLONE_NEWPID,
        CLONE_NEWNET,
    ):
        assert run(arch, nr, flag | SIGCHLD) == EPERM, hex(flag)
    assert run(arch, nr, FORK_FLAGS) == ALLOW
    assert run(arch, nr, THREAD_FLAGS) == ALLOW
    assert run(arch, nr, 0) == ALLOW
    assert run(arch, nr, CLONE_NEWUSER << 32) == ALLOW  # clone's flags are an int: low 32


def test_x32_calls_are_held_to_the_same_rules() -> None:
    x32 = 0x40000000
    for nr in (272, 308, 425, 321, 298, 323, 521, 528, 248):  # unshare ... x32's own ptrace
        assert run(X86_64, x32 | nr) == EPERM, nr
    assert run(X86_64, x32 | 435) == ENOSYS
    assert run(X86_64, x32 | 56, CLONE_NEWUSER) == EPERM
    assert run(X86_64, x32 | 56, FORK_FLAGS) == ALLOW
    assert run(X86_64, x32 | 0) == ALLOW  # read


def test_an_architecture_the_filter_has_no_numbers_for_is_refused() -> None:
    """Fail closed: ppc64le's calls are not matched against x86_64's numbers and let through."""
    for nr in (0, 1, 11, 120, 435):
        assert run(0xC0000015, nr) == EPERM  # AUDIT_ARCH_PPC64LE


# ---------------------------------------------------------------- in the real sandbox


def shell_tools(root: Path) -> ToolRegistry:
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=Project()),
        agent=AgentDecl.model_validate({"name": "a", "tools": ["shell"]}),
        services=Services(providers=CAPABILITIES, root=root),
    )
    return ToolRegistry(builtin.provide(ctx).tools)


PROBE = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def said(name, got):
    print(name, got, errno.errorcode.get(ctypes.get_errno(), "-") if got == -1 else "ok")
def child(got):  # a clone that was let through: the child leaves at once
    if got == 0:
        os._exit(0)
    return got
said("clone_newuser", child(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)))
args = (ctypes.c_uint64 * 11)()
said("clone3", child(libc.syscall(435, ctypes.byref(args), 88)))
said("unshare", libc.unshare(0x10000000))
said("unshare_net", libc.unshare(0x40000000))
fd = os.open("/proc/self/ns/uts", os.O_RDONLY)
said("setns", libc.setns(fd, 0))
params = (ctypes.c_uint8 * 120)()
said("io_uring_setup", libc.syscall(425, 8, ctypes.byref(params)))
said("bpf", libc.syscall(321, 0, 0, 0))
said("perf_event_open", libc.syscall(298, 0, 0, -1, -1, 0))
said("userfaultfd", libc.syscall(323, 0))
said("ptrace", libc.syscall(101, 0, 0, 0, 0))
said("keyctl", libc.syscall(250, 0, 0, 0, 0, 0))
"""

STILL_WORKS = r"""
import multiprocessing, os, subprocess, threading
def square(n):
    return n * n
if __name__ == "__main__":
    box = []
    t = threading.Thread(target=lambda: box.append("thread-ok"))
    t.start(); t.join(); print(*box)
    print(subprocess.run(["sh", "-c", "echo sh-ok"], capture_output=True, text=True).stdout)
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    print("fork-ok" if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7 else "fork-bad")
    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            print(method, "pool-ok" if pool.map(square, [1, 2, 3]) == [1, 4, 9] else "bad")
"""


def python(code: str) -> str:
    return f"cat > probe.py <<'EOF'\n{code}\nEOF\npython3 probe.py 2>&1"


@needs_bwrap
async def test_no_program_in_the_sandbox_gets_a_namespace_or_io_uring(
    tmp_path: Path, mode: str
) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86_64's system call numbers")
    tools = shell_tools(tmp_path)
    result = await tools.call(
        "shell",
        {"command": "unshare -Ur id 2>&1; echo unshare-rc=$?; " + python(PROBE)},
    )
    out = result.content
    assert "unshare-rc=0" not in out and "uid=0" not in out, out
    assert "Operation not permitted" in out, out
    for name in ("unshare", "unshare_net", "setns", "clone_newuser", "io_uring_setup", "bpf"):
        assert f"\n{name} -1 EPERM" in out, (name, out)
    for name in ("perf_event_open", "userfaultfd", "ptrace", "keyctl"):
        assert f"\n{name} -1 EPERM" in out, (name, out)
    assert "\nclone3 -1 ENOSYS" in out, out


@needs_bwrap
async def test_forks_threads_subprocesses_and_multiprocessing_still_work(
    tmp_path: Path, mode: str
) -> None:
    tools = shell_tools(tmp_path)
    result = await tools.call("shell", {"command": python(STILL_WORKS)})
    out = result.content
    for word in ("thread-ok", "sh-ok", "fork-ok", "fork pool-ok", "spawn pool-ok"):
        assert word in out, (word, out)
    assert not result.is_error, out
