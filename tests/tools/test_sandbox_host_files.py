"""What a sandboxed call leaves on the host, and what the host lends it (attack-25 #2-#6).

- The sandbox folder (fim.yaml `sandbox:`, wherever it is) and `<sandbox>-keys` are fim's
  user's alone (0700), an existing wider one narrowed, in both user modes; the sandbox
  still writes its `scratch/`, which it sees mounted nosuid.
- A call that finds its folder full writes files of at most `FOLDER_SLACK_MB`, still reads
  and deletes; a call that takes the folder past `folder_mb` in one go and exits is told.
- The egress proxy's socket is the sandbox user's alone.
- `/dev` is read-only and `/dev/shm` a tmpfs capped like `/tmp`, usable by the sandbox.
- The kernel keyring calls are refused (a hand-written seccomp filter).

Each sandbox test runs in the mode this host gives fim and, as root, in the user-namespace
mode too (`sandbox._PRIVILEGED = False`, the mode of a normal user and of root without
CAP_SYS_ADMIN). Offline; skipped where bubblewrap is missing.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from pathlib import Path

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project, WebFetchSettings
from fim.config.schema.agent import SandboxSettings
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.egress import Egress
from fim.tools.sandbox import seccomp
from fim.tools.sandbox.limits import held_bytes

NOBODY = 65534
MB = 1024 * 1024

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)


def shell_tools(
    root: Path, project: Project | None = None, owner: str = "", **agent: object
) -> ToolRegistry:
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=project or Project()),
        agent=AgentDecl.model_validate({"name": "a", "tools": ["shell"], **agent}),
        services=Services(providers=CAPABILITIES, root=root),
        owner=owner,
    )
    return ToolRegistry(builtin.provide(ctx).tools)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ------------------------------------------------------------ #2 the sandbox folder


@needs_bwrap
async def test_a_sandbox_folder_outside_dot_fim_is_its_users_alone(
    tmp_path: Path, mode: str
) -> None:
    """fim.yaml `sandbox:` may name any folder. It is made 0700, and one made wider before
    (by hand, by an older fim) is narrowed, so nothing a call leaves in `scratch/` (a setuid
    copy of a shell included) is reachable by another user. The call still writes there."""
    (tmp_path / "work" / "box").mkdir(parents=True, mode=0o755)
    os.chmod(tmp_path / "work" / "box", 0o755)  # whatever the umask
    tools = shell_tools(tmp_path, Project(sandbox="work/box"))
    result = await tools.call("shell", {"command": "echo kept > note && cat note"})
    assert "[exit code 0]" in result.content and "kept" in result.content, result.content
    assert mode_of(tmp_path / "work" / "box") == 0o700
    assert mode_of(tmp_path / "work") == 0o755  # the folders above are left as they are


@needs_bwrap
async def test_a_keys_sandbox_folder_and_its_parent_are_their_users_alone(
    tmp_path: Path, mode: str
) -> None:
    """A key's runs work in `<sandbox>-keys/<id>`: both folders are 0700 (the list of ids
    and every key's files are no other user's to read)."""
    keys = tmp_path / "work" / "box-keys"
    keys.mkdir(parents=True)
    os.chmod(keys, 0o755)
    tools = shell_tools(tmp_path, Project(sandbox="work/box"), owner="tenant-a")
    result = await tools.call("shell", {"command": "echo kept > note"})
    assert "[exit code 0]" in result.content, result.content
    (folder,) = keys.iterdir()
    assert (mode_of(keys), mode_of(folder)) == (0o700, 0o700)
    assert (folder / "scratch" / "note").read_text() == "kept\n"


@needs_bwrap
async def test_the_scratch_folder_is_mounted_nosuid_inside_the_sandbox(
    tmp_path: Path, mode: str
) -> None:
    """Inside, a setuid file of scratch/ grants nothing either: bwrap binds it nosuid."""
    tools = shell_tools(tmp_path)
    scratch = tmp_path / ".fim" / "sandbox" / "scratch"
    result = await tools.call("shell", {"command": "cat /proc/self/mountinfo"})
    (line,) = [m for m in result.content.splitlines() if m.split()[4:5] == [str(scratch)]]
    assert "nosuid" in line.split()[5].split(","), line


# ------------------------------------------------------------------ #3 folder_mb

FALLOCATE = (
    "python3 -c \"import os\nfor i in range(2): os.posix_fallocate(os.open('{p}%d' % i, "
    'os.O_CREAT | os.O_WRONLY), 0, 12 * 2**20)"'
)


@needs_bwrap
async def test_a_call_taking_its_folder_past_the_cap_at_once_is_told_so(tmp_path: Path) -> None:
    """A call that allocates its files in one go and exits before the watchdog's next
    count is counted once more when it ended: the model reads that the folder is full."""
    tools = shell_tools(tmp_path, sandbox=SandboxSettings(folder_mb=16))
    result = await tools.call("shell", {"command": FALLOCATE.format(p="a")})
    assert result.is_error
    assert "holds more than 16 MB" in result.content, result.content


@needs_bwrap
async def test_a_call_that_finds_its_folder_full_writes_small_files_reads_and_deletes(
    tmp_path: Path,
) -> None:
    """Such a call's files are capped at `FOLDER_SLACK_MB` (RLIMIT_FSIZE: a file allocated
    at once is on disk before any count); reading, small writes and deleting work."""
    tools = shell_tools(tmp_path, sandbox=SandboxSettings(folder_mb=16))
    await tools.call("shell", {"command": FALLOCATE.format(p="a")})
    folder = tmp_path / ".fim" / "sandbox"
    assert (held_bytes(folder) or 0) > 16 * MB  # full now
    probe = (
        "python3 -c \"import resource; print('fsize', resource.getrlimit(resource.RLIMIT_FSIZE))\""
        " && echo small > small && cat small && rm a0 a1 && ls"
    )
    result = await tools.call("shell", {"command": probe})
    assert "[exit code 0]" in result.content, result.content
    assert f"fsize ({MB}, {MB})" in result.content
    assert "small\nsmall" in result.content  # written, read; a0 and a1 deleted
    assert (held_bytes(folder) or 0) < 16 * MB
    after = await tools.call(
        "shell",
        {
            "command": 'python3 -c "import resource; '
            'print(resource.getrlimit(resource.RLIMIT_FSIZE)[0])"'
        },
    )
    assert str(64 * MB) in after.content  # room again: the usual cap


# ----------------------------------------------------------------- #4 egress socket


async def test_the_egress_socket_is_the_sandbox_users_alone(tmp_path: Path) -> None:
    """The proxy's folder is 0700 and its socket 0600; in root mode both belong to uid
    65534 (the sandbox's user), who can connect; otherwise to fim's user, whom the
    sandbox's uid is mapped to."""
    owner = NOBODY if os.geteuid() == 0 else None
    async with Egress(WebFetchSettings(), owner=owner) as egress:
        folder, sock = os.stat(egress.directory), os.stat(egress.socket)
        assert (stat.S_IMODE(folder.st_mode), stat.S_IMODE(sock.st_mode)) == (0o700, 0o600)
        expected = NOBODY if owner is not None else os.geteuid()
        assert {folder.st_uid, sock.st_uid} == {expected}
        if owner is not None:  # uid 65534 reaches it: connect as that user in a child
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's exit code is the check
                code = 1
                try:
                    os.setgroups([])
                    os.setresgid(NOBODY, NOBODY, NOBODY)
                    os.setresuid(NOBODY, NOBODY, NOBODY)
                    socket.socket(socket.AF_UNIX).connect(str(egress.socket))
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0


# ------------------------------------------------------------------ #5 /dev, /dev/shm


@needs_bwrap
async def test_dev_is_read_only_and_dev_shm_capped_but_usable(tmp_path: Path, mode: str) -> None:
    """/dev takes no files; /dev/shm takes what /tmp may hold (POSIX semaphores and shared
    memory still work: multiprocessing's lock), not half the host's memory."""
    tools = shell_tools(tmp_path)
    result = await tools.call(
        "shell",
        {
            "command": "touch /dev/x 2>/dev/null || echo dev-ro; "
            "python3 -c \"import multiprocessing as m; m.Lock(); print('lock-ok')\"; "
            "head -c 1000000 /dev/zero > /dev/shm/a && echo shm-ok; "
            "df -k /dev/shm | tail -1"
        },
    )
    assert "dev-ro" in result.content and "lock-ok" in result.content, result.content
    assert "shm-ok" in result.content, result.content
    size_kb = int(result.content.strip().splitlines()[-1].split()[1])
    assert size_kb == 64 * 1024  # Limits.tmp_mb


# ----------------------------------------------------------------- #6 kernel keyring

KEYCTL = (
    'python3 -c "import ctypes, os\n'
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "got = libc.syscall({nr}, b'user', b'fim-test', b'x', 1, ctypes.c_int(-4))\n"
    "print('add_key', got, os.strerror(ctypes.get_errno()))\""
)


@needs_bwrap
async def test_the_kernel_keyring_calls_are_refused_in_every_mode(
    tmp_path: Path, mode: str
) -> None:
    """add_key, request_key and keyctl fail with EPERM (in root mode the keyring of host
    `nobody` outlives every call; one filter for both modes)."""
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86_64's system call number")
    tools = shell_tools(tmp_path)
    result = await tools.call("shell", {"command": KEYCTL.format(nr=248)})
    assert "add_key -1 Operation not permitted" in result.content, result.content


def test_the_seccomp_filter_refuses_the_keyring_calls() -> None:
    """The hand-written BPF, run on every listed architecture's numbers and on neighbours:
    EPERM for add_key, request_key and keyctl, allowed for neighbours the filter does not
    refuse either (an interpreter of the opcodes these calls reach, so the jumps are
    checked everywhere, not only on this host; the rest of the filter: test_attack60_seccomp)."""
    code = seccomp.program()
    ops = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]

    def run(arch: int, nr: int) -> int:
        data = struct.pack("=iI", nr, arch)
        pc, acc = 0, 0
        while True:
            op, jt, jf, k = ops[pc]
            if op == 0x20:
                acc = struct.unpack("=I", data[k : k + 4])[0]
                pc += 1
            elif op == 0x15:
                pc += 1 + (jt if acc == k else jf)
            else:
                assert op == 0x06
                return k

    eperm = 0x00050000 | 1
    for arch, numbers in seccomp.KEYRING_CALLS.items():
        for nr in numbers:
            assert run(arch, nr) == eperm
        for nr in (0, 59, 247, 251, 285, 289, 216, 312, 0x40000000):
            assert run(arch, nr) == 0x7FFF0000
    assert run(0xC000003E, 250) == eperm
    assert run(0x12345678, 250) == eperm  # an architecture it has no numbers for: refused


async def test_file_ops_makes_a_sandbox_folder_its_users_alone_too(tmp_path: Path) -> None:
    """`file_ops` may be the first tool to make the sandbox folder (no sandboxed call yet):
    it is made 0700 there too, a key's `<sandbox>-keys` with it, not with the umask."""
    ctx = RunContext(
        snapshot=Snapshot(root=tmp_path, project=Project(sandbox="work/box")),
        agent=AgentDecl.model_validate({"name": "a", "tools": ["file_ops"]}),
        services=Services(providers=CAPABILITIES, root=tmp_path),
        owner="owner-of-a-key",
    )
    tools = ToolRegistry(builtin.provide(ctx).tools)
    result = await tools.call("file_ops", {"operation": "write", "path": "n", "content": "x"})
    assert not result.is_error, result.content
    keys = tmp_path / "work" / "box-keys"
    (own,) = keys.iterdir()
    assert (mode_of(keys), mode_of(own)) == (0o700, 0o700)
