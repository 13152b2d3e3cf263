"""What a sandboxed command left behind, and the model's view of it.

Its own module because reading the output safely (a flood never fills memory, a killed run
keeps its partial output) and wording the outcome for the model (which limit was hit, what
to do next) change for other reasons than how the sandbox is built or watched.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from typing import BinaryIO

from fim.masking import known
from fim.tools.builtin._common import clip, fail
from fim.tools.sandbox.limits import MAX_FOLDER_FILES
from fim.types import ToolResult

_CHUNK = 65_536

NAMESPACE_HINT = (
    "this host does not let this user create the sandbox's namespaces: on Ubuntu 23.10+ "
    "`sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile "
    "for bwrap, in Docker `--security-opt seccomp=unconfined`{root}; see docs/security.md"
)
UPGRADE_HINT = (
    "this bubblewrap is too old: the sandbox needs bubblewrap 0.7 or newer (`--size` and "
    "`--perms` for its capped, writable /tmp); upgrade it; see docs/security.md"
)
_REFUSALS = (
    "uid map",
    "gid map",
    "namespace",
    "No permissions to create",
    "Operation not permitted",
    "No space left on device",
)
"""What bwrap says when the kernel (a sysctl, AppArmor, seccomp, `max_user_namespaces=0`:
ENOSPC) refuses it a user namespace or a mount in one."""


def setup_hint(error: str) -> str:
    """What the operator can do about bwrap's `error` (the sandbox did not start)."""
    if any(word in error for word in _REFUSALS):
        # root needs no user namespace (unless it lacks CAP_SYS_ADMIN, as in Docker)
        return NAMESPACE_HINT.format(root="" if os.geteuid() == 0 else ", or run fim as root")
    if "Unknown option" in error:
        return UPGRADE_HINT
    return "see docs/security.md"


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
        """The pipe's text, at most `limit` characters, masked before it is cut: the
        program may print a secret of its environment, padded so a cut lands inside it.
        What was read past `keep` is a cut too, whose edge is masked (`Masker.edge`)."""
        masker = known()
        dropped = self.total > len(self.data)
        text = masker.edge(self.text()) if dropped else self.text()
        shown, cut = masker.head(text, limit)
        if dropped or cut:
            return f"--- {label} ---\n{shown}\n[... {label} truncated: {self.total} bytes in total]"
        return f"--- {label} ---\n{shown.rstrip()}"


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
    folder_full: bool = False
    """The sandbox folder held more than `folder_mb` (files stay between calls)."""
    too_many_files: bool = False
    """With `folder_full`: the folder held more than `MAX_FOLDER_FILES` entries (or one fim
    cannot read), whatever their size."""
    inodes_low: bool = False
    """With `disk_exceeded`: the disk was left with too few free inodes (files)."""
    folder_mb: int = 0
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
        error = outcome.setup_error
        if error.startswith("bwrap: "):
            error = f"{error} ({setup_hint(error)})"
        return fail(f"the sandbox could not start: {error}")
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
    if outcome.folder_full and outcome.too_many_files:
        return fail(
            f"the sandbox folder holds more than {MAX_FOLDER_FILES:,} files and folders "
            "(the cap on one sandbox folder; files stay there between calls), or a folder "
            "fim cannot read, so the program was killed. Write fewer, larger files and "
            "delete the ones you no longer need (e.g. `rm -r` in the shell tool).\n" + body
        )
    if outcome.folder_full:
        return fail(
            f"the sandbox folder holds more than {outcome.folder_mb} MB (files stay there "
            "between calls), so the program was killed once it wrote more. Delete files "
            "you no longer need (e.g. `rm` in the shell tool), then write again.\n" + body
        )
    if outcome.disk_exceeded and outcome.inodes_low:
        return fail(
            "the disk holding the sandbox folder is nearly out of inodes (room for new "
            "files, whatever their size), so the program was killed. Create fewer files, "
            "and delete files in the scratch folder you no longer need.\n" + body
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
