"""The sandbox's seccomp filter: the kernel keyring system calls are refused (attack-25 #6).

Its own module because it is a small program for the kernel, written by hand: classic BPF,
given to bwrap on a descriptor (`--seccomp FD`), with no new dependency (no libseccomp
bindings). In root mode every call runs as the real host user `nobody`, whose kernel user
keyring outlives the call: one tenant's call left a key there (`add_key`) that another
tenant's later call read (`keyctl`), a channel across tenants and a quota (200 keys) one
tenant could fill. No program a model writes needs the kernel keyring, so `add_key`,
`request_key` and `keyctl` fail with EPERM, as Docker's default profile has them; every other
call is allowed.

The filter reads the call's architecture first (`seccomp_data.arch`): a 64-bit kernel also
takes the calls of 32-bit programs, with other numbers (x86_64: i386 and x32; aarch64:
32-bit ARM), so each architecture such a kernel runs has its own numbers here.
"""

from __future__ import annotations

import errno
import struct

# classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k:k+4]
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: pc += (A == k) ? jt : jf
_RET_K = 0x06  # BPF_RET | BPF_K
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno
_X32 = 0x40000000  # __X32_SYSCALL_BIT

KEYRING_CALLS: dict[int, tuple[int, ...]] = {
    # AUDIT_ARCH_*: add_key, request_key, keyctl
    0xC000003E: (248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250),  # x86_64 and x32
    0x40000003: (286, 287, 288),  # i386
    0xC00000B7: (217, 218, 219),  # aarch64
    0x40000028: (309, 310, 311),  # 32-bit ARM (EABI)
}
"""The refused system calls' numbers, by the architecture field of the call."""


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return code, jt, jf, k


def program() -> bytes:
    """The filter as bwrap reads it: `struct sock_filter` entries in native byte order.

    One block per architecture: if the architecture matches, load the call's number, jump
    to the refusal on a keyring call, else allow; if it does not, go on to the next block.
    An architecture none of them names is allowed (its kernel runs none of these numbers).
    """
    ops: list[tuple[int, int, int, int]] = [_op(_LD_W_ABS, _ARCH)]
    refusals: list[int] = []  # indexes of the jumps to the refusal, patched below
    for arch, numbers in KEYRING_CALLS.items():
        block_length = 1 + len(numbers) + 1  # load, compares, allow
        ops.append(_op(_JEQ_K, arch, 0, block_length))
        ops.append(_op(_LD_W_ABS, _NR))
        for number in numbers:
            refusals.append(len(ops))
            ops.append(_op(_JEQ_K, number))
        ops.append(_op(_RET_K, _ALLOW))
    ops.append(_op(_RET_K, _ALLOW))
    refuse = len(ops)
    ops.append(_op(_RET_K, _ERRNO | errno.EPERM))
    for at in refusals:
        code, _, jf, k = ops[at]
        ops[at] = (code, refuse - at - 1, jf, k)
    return b"".join(struct.pack("=HBBI", *op) for op in ops)


__all__ = ["KEYRING_CALLS", "program"]
