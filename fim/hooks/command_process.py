"""The process a command hook runs as, and how it is killed.

Kept apart from the hook's protocol (what the command is given, how its answer is read)
because this is where the timeout is enforced: the command starts in a session of its own,
and on a timeout or a cancelled call its whole process group is killed, so a `sleep` in a
script or the far end of a pipeline cannot outlive the call it guards.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


async def run_command(
    command: str, stdin: str, env: dict[str, str], *, cwd: str, timeout: float
) -> tuple[int | None, str, str]:
    """Exit code (None on timeout), stdout and stderr of one run of the command."""
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
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout=timeout)
    except TimeoutError:
        await kill_group(process)
        return None, "", ""
    except BaseException:
        await kill_group(process)
        raise
    return (
        process.returncode if process.returncode is not None else -1,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
    )


async def kill_group(process: asyncio.subprocess.Process) -> None:
    """Kill the command and everything it started (`sleep` in a script, a pipeline)."""
    # deferred: loading asyncio costs a few ms
    import asyncio

    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(process.wait(), 5)
