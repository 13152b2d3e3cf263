"""The process a command hook runs as, and how it is killed.

Kept apart from the hook's protocol (what the command is given, how its answer is read)
because this is where the timeout is enforced: the command starts in a session of its own,
and on a timeout or a cancelled call its whole process group is killed, so a `sleep` in a
script or the far end of a pipeline cannot outlive the call it guards.

Its output is read as it comes, up to `MAX_OUTPUT_BYTES` per stream: what a hook prints is
often sized by the model (a scanner printing the file a Write names, pointed at /dev/zero;
a hook echoing `tool_input`), and `communicate()` kept all of it, 400 MB of it in one test.
A hook that writes more is killed and `HookOutputTooLarge` blocks the call (hooks fail
closed): a JSON answer cut at the cap is never read as a decision.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING

from fim import child_stdin

if TYPE_CHECKING:
    import asyncio

MAX_OUTPUT_BYTES = 1 << 20
"""Bytes of stdout, and of stderr, one run of a hook command may write (1 MiB): room for any
JSON answer or reason, and the most of it fim holds in memory."""

_CHUNK = 65_536


class HookOutputTooLarge(RuntimeError):
    """The command wrote more than `MAX_OUTPUT_BYTES` to a stream; it was killed. Raised so
    the hook chain blocks the call naming the hook (`fim.hooks.runner`), as for any hook
    that fails."""


def _size(limit: int) -> str:
    return f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit} bytes"


async def run_command(
    command: str, stdin: str, env: dict[str, str], *, cwd: str, timeout: float
) -> tuple[int | None, str, str]:
    """Exit code (None on timeout), stdout and stderr of one run of the command;
    `HookOutputTooLarge` (the command killed) when it writes more than `MAX_OUTPUT_BYTES`
    to either stream."""
    # deferred: not at import, the compiler's hook check loads fim.hooks.command and this module
    import asyncio

    process = await asyncio.create_subprocess_shell(
        command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(_exchange(process, stdin.encode()), timeout=timeout)
    except TimeoutError:
        await kill_group(process)
        return None, "", ""
    except BaseException:
        await kill_group(process)
        raise
    await _end_group(process.pid)
    return (
        process.returncode if process.returncode is not None else -1,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
    )


async def _exchange(process: asyncio.subprocess.Process, stdin: bytes) -> tuple[bytes, bytes]:
    """Feed stdin and read both streams at once (a command blocked writing one pipe while
    fim waits on the other would hang), each up to the cap; then wait for the exit."""
    # deferred: loading asyncio costs a few ms
    import asyncio

    assert process.stdin and process.stdout and process.stderr
    feed = asyncio.ensure_future(child_stdin.feed(process.stdin, stdin))
    out = asyncio.ensure_future(_read(process.stdout, "stdout"))
    err = asyncio.ensure_future(_read(process.stderr, "stderr"))
    try:
        await asyncio.gather(feed, out, err)
    finally:
        for task in (feed, out, err):
            task.cancel()
        # collected so an overflow of the other stream is not logged as never retrieved
        await asyncio.gather(feed, out, err, return_exceptions=True)
    await process.wait()
    return out.result(), err.result()


async def _read(stream: asyncio.StreamReader, name: str) -> bytes:
    """The stream to its end, in chunks; past `MAX_OUTPUT_BYTES` it stops with
    `HookOutputTooLarge` (the caller kills the command) rather than keep or skip the rest."""
    data = bytearray()
    while chunk := await stream.read(_CHUNK):
        data += chunk
        if len(data) > MAX_OUTPUT_BYTES:
            raise HookOutputTooLarge(
                f"the hook command wrote more than {_size(MAX_OUTPUT_BYTES)} to {name}, the most "
                "fim reads of a hook's output, and was killed"
            )
    return bytes(data)


async def kill_group(process: asyncio.subprocess.Process) -> None:
    """Kill the command and everything it started (`sleep` in a script, a pipeline), then
    read its pipes to their end, dropping what is left: a pipe whose reading stopped at the
    cap never saw its end, and its transport (file descriptors) would stay open."""
    # deferred: loading asyncio costs a few ms
    import asyncio

    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(_ended(process), 5)


async def _end_group(group: int) -> None:
    """What the command left running (`scanner "$file" &`) ends with the call, as on a
    timeout: its group is killed, and waited for briefly (a killed process takes a moment
    to exit; one nobody reaps stays a zombie, which runs nothing)."""
    # deferred: loading asyncio costs a few ms
    import asyncio

    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing left: the usual case
        return
    for _ in range(GROUP_WAITS):
        await asyncio.sleep(0.005)
        if not await asyncio.to_thread(_running, group):  # a /proc walk: ms, off the loop
            return


GROUP_WAITS = 20
"""Looks, 5 ms apart, for a killed group's processes to exit before the call returns."""


def _running(group: int) -> bool:
    """Whether a process of `group` is alive and not a zombie (Linux `/proc`; elsewhere,
    whether the group exists)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
                return True
    return False


async def _ended(process: asyncio.subprocess.Process) -> None:
    """The pipes read to their end, then the exit: asyncio's `wait()` returns only once
    every pipe is closed, and a pipe whose reading stopped at the cap is closed by reading
    it (waiting first made every overflowing hook take the whole 5 s)."""
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            while await stream.read(_CHUNK):
                pass
    await process.wait()
