"""Writing to a child process's stdin, where the child may legitimately not read it.

A hook command that ignores its event (`true`, `npm run lint`, `cat CONTEXT.md`) or a
sandboxed program that exits first leaves its stdin unread: no error, as with
`communicate()` and as in Claude Code (which ignores EPIPE there). What "unread" looks like
depends on the event loop and on timing: the stdlib loop raises `BrokenPipeError` or
`ConnectionResetError` from the write or `drain()`; uvloop closes the pipe's transport as
soon as the child exits and then raises `RuntimeError` ("the handler is closed") from
`write()` (attack-59 F2: on `fim serve` an allow-all hook blocked 40-78% of calls).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


async def feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    """Write `data` to the child's stdin, wait for it to be taken, and close the pipe. A
    child that exited or closed its stdin without reading all of it is no error: the
    caller goes on to its exit code and output. Any other failure is raised."""
    try:
        if data and not pipe.is_closing():
            pipe.write(data)
            await pipe.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    except RuntimeError:
        if not pipe.is_closing():  # only a pipe closed under us (uvloop) is "unread"
            raise
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            pipe.close()
