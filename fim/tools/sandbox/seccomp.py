"""The sandbox's seccomp filter: the calls no program a model writes needs, and that open
the kernel's largest attack surface or a channel out of the call, are refused.

Its own module because it is a small program for the kernel, written by hand: classic BPF,
given to bwrap on a descriptor (`--seccomp FD`), with no new dependency (no libseccomp
bindings). Refused with EPERM, as Docker's default profile refuses them to a container
without capabilities:

- the kernel keyring (`add_key`, `request_key`, `keyctl`; attack-25 #6): in root mode every
  call runs as the real host user `nobody`, whose user keyring outlives the call, so one
  tenant's call left a key there that another tenant's later call read;
- new namespaces (attack-60 F3): `unshare` and `setns` whatever their flags, and `clone`
  with a `CLONE_NEW*` flag in its first argument (a user namespace gave a program a full
  capability set of its own, and with it nf_tables, mounts and the rest of the kernel code
  only a namespace's root reaches: `unshare -Ur` made `root`). Every other `clone` (fork,
  threads, `posix_spawn`) is allowed: the flags are read from the call;
- io_uring (`io_uring_setup`, `_enter`, `_register`), `bpf`, `perf_event_open`,
  `userfaultfd`, `ptrace`, `kexec_load`, `kexec_file_load`, `init_module`, `finit_module`
  and `delete_module`: the first four are where most local privilege escalations of recent
  years were, the rest need capabilities the sandbox never has.

`clone3` fails with ENOSYS, as under Docker: its flags are in memory a filter cannot read,
and the C library then falls back to `clone` (glibc does on ENOSYS), whose flags it can.

The filter reads the call's architecture first (`seccomp_data.arch`): a 64-bit kernel also
takes the calls of 32-bit programs, with other numbers (x86_64: i386 and x32; aarch64:
32-bit ARM), so each architecture such a kernel runs has its own numbers here. It fails
closed: a call of an architecture not listed is refused (on a host of another architecture,
ppc64le or s390x, nothing runs in the sandbox rather than every call being allowed).
"""

from __future__ import annotations

import errno
import struct
from typing import NamedTuple

# classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k:k+4]
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: pc += (A == k) ? jt : jf
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K: pc += (A & k) ? jt : jf
_RET_K = 0x06  # BPF_RET | BPF_K
# offsets in struct seccomp_data (linux/seccomp.h): nr, arch, instruction_pointer, args[6];
# args[0]'s lower 32 bits (each listed architecture is little-endian)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno
_X32 = 0x40000000  # __X32_SYSCALL_BIT

NEW_NAMESPACES = 0x7E020000
"""The `CLONE_NEW*` flags `clone` takes (linux/sched.h): NEWNS 0x00020000, NEWCGROUP
0x02000000, NEWUTS 0x04000000, NEWIPC 0x08000000, NEWUSER 0x10000000, NEWPID 0x20000000,
NEWNET 0x40000000 (the mask Docker's profile uses). CLONE_NEWTIME (0x80) is not among them:
in `clone`'s flags that bit is part of the exit signal (CSIGNAL)."""


class Numbers(NamedTuple):
    """One architecture's system call numbers the filter acts on."""

    refused: tuple[int, ...]
    """Refused with EPERM whatever their arguments."""
    clone: tuple[int, ...]
    """`clone`: refused with EPERM when its flags ask for a new namespace."""
    clone3: tuple[int, ...]
    """`clone3`: ENOSYS, so the C library falls back to `clone`."""


# Each call's number by table: arch/x86/entry/syscalls/syscall_64.tbl (x86_64),
# syscall_32.tbl (i386), include/uapi/asm-generic/unistd.h (aarch64 and riscv64) and
# arch/arm/tools/syscall.tbl (32-bit ARM, EABI); None where the table has no such call.
_TABLES = ("x86_64", "i386", "generic", "arm")
_REFUSED: dict[str, tuple[int | None, int | None, int | None, int | None]] = {
    "add_key": (248, 286, 217, 309),
    "request_key": (249, 287, 218, 310),
    "keyctl": (250, 288, 219, 311),
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
    "kexec_file_load": (320, None, 294, 401),
    "init_module": (175, 128, 105, 128),
    "finit_module": (313, 350, 273, 379),
    "delete_module": (176, 129, 106, 129),
}
_CLONE = (56, 120, 220, 120)
_CLONE3 = (435, 435, 435, 435)
# x32 runs the x86_64 table's `common` and `x32` rows, numbered with __X32_SYSCALL_BIT:
# the x86_64 numbers, and its own ptrace 521 and kexec_load 528 (its 101 and 246 are
# x86_64-only rows, refused anyway).
_X32_ONLY = (521, 528)


def _numbers(table: str) -> Numbers:
    column = _TABLES.index(table)
    refused = tuple(n for row in _REFUSED.values() if (n := row[column]) is not None)
    return Numbers(refused=refused, clone=(_CLONE[column],), clone3=(_CLONE3[column],))


def _with_x32(numbers: Numbers) -> Numbers:
    return Numbers(
        refused=(*numbers.refused, *(_X32 | n for n in (*numbers.refused, *_X32_ONLY))),
        clone=(*numbers.clone, *(_X32 | n for n in numbers.clone)),
        clone3=(*numbers.clone3, *(_X32 | n for n in numbers.clone3)),
    )


ARCHITECTURES: dict[int, Numbers] = {
    0xC000003E: _with_x32(_numbers("x86_64")),  # AUDIT_ARCH_X86_64: x86_64 and x32
    0x40000003: _numbers("i386"),  # AUDIT_ARCH_I386
    0xC00000B7: _numbers("generic"),  # AUDIT_ARCH_AARCH64
    0xC00000F3: _numbers("generic"),  # AUDIT_ARCH_RISCV64
    0x40000028: _numbers("arm"),  # AUDIT_ARCH_ARM
}
"""The numbers the filter acts on, by the architecture field of the call."""

KEYRING_CALLS: dict[int, tuple[int, ...]] = {
    0xC000003E: (248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250),  # x86_64 and x32
    0x40000003: (286, 287, 288),  # i386
    0xC00000B7: (217, 218, 219),  # aarch64
    0xC00000F3: (217, 218, 219),  # riscv64
    0x40000028: (309, 310, 311),  # 32-bit ARM (EABI)
}
"""add_key, request_key and keyctl, by architecture (attack-25 #6)."""


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return code, jt, jf, k


def program() -> bytes:
    """The filter as bwrap reads it: `struct sock_filter` entries in native byte order.

    One block per architecture: if the architecture matches, load the call's number and
    jump to `clone`'s check, the ENOSYS of `clone3` or the refusal, else allow; if it does
    not, go on to the next block. After the last block, a call of an architecture none of
    them names is refused. Jumps go forward only (classic BPF), at most 255 instructions.
    """
    ops: list[tuple[int, int, int, int]] = [_op(_LD_W_ABS, _ARCH)]
    jumps: list[tuple[int, str]] = []  # (index of a compare, the label its true branch takes)
    for arch, numbers in ARCHITECTURES.items():
        compares = [
            *((n, "clone") for n in numbers.clone),
            *((n, "enosys") for n in numbers.clone3),
            *((n, "refuse") for n in numbers.refused),
        ]
        ops.append(_op(_JEQ_K, arch, 0, 1 + len(compares) + 1))  # no: the next block
        ops.append(_op(_LD_W_ABS, _NR))
        for number, label in compares:
            jumps.append((len(ops), label))
            ops.append(_op(_JEQ_K, number))
        ops.append(_op(_RET_K, _ALLOW))
    labels = {"refuse": len(ops)}  # an architecture no block names: refused (fail closed)
    ops.append(_op(_RET_K, _ERRNO | errno.EPERM))
    labels["enosys"] = len(ops)
    ops.append(_op(_RET_K, _ERRNO | errno.ENOSYS))
    labels["clone"] = len(ops)  # a new namespace in its flags: refused, else allowed
    ops.append(_op(_LD_W_ABS, _ARG0_LOW))
    ops.append(_op(_JSET_K, NEW_NAMESPACES, 1, 0))
    ops.append(_op(_RET_K, _ALLOW))
    ops.append(_op(_RET_K, _ERRNO | errno.EPERM))
    for at, label in jumps:
        code, _, jf, k = ops[at]
        offset = labels[label] - at - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"seccomp: a jump of {offset} instructions (at most 255)")
        ops[at] = (code, offset, jf, k)
    return b"".join(struct.pack("=HBBI", *op) for op in ops)


__all__ = ["ARCHITECTURES", "KEYRING_CALLS", "NEW_NAMESPACES", "program"]
