"""The process group of each stdio MCP server fim starts, and its end: killed when the
server's transport closes (an ended run, `fim serve` stopping, the connection restarted, a
timeout) and when the server itself exits, so what it started (`sh -c`, `npx`, a helper, a
browser) neither outlives fim nor holds the server's output open (attack-54 F3).

Imported with a stdio server's client only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

stdio_groups: ContextVar[list[int] | None] = ContextVar("fim_stdio_groups", default=None)
"""Where the process factory notes the group of each stdio server it starts (`group_ended`)."""
stdio_watchers: ContextVar[list[asyncio.Task[None]] | None] = ContextVar(
    "fim_stdio_watchers", default=None
)
"""Where the process factory keeps each server's `end_group_with` task (`group_ended`)."""


async def end_group_with(process: Any, group: int) -> None:
    """Kill `group` once its leader, the server, exited: what it started (a helper, `sleep`,
    a browser) holds the server's stdout open, so without this the SDK never read the end
    of a crashed server, and its call waited out its whole timeout (120 s by default)."""
    await process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left
        os.killpg(group, signal.SIGKILL)


@contextlib.asynccontextmanager
async def group_ended(transport: Any) -> AsyncIterator[Any]:
    """The SDK's stdio `transport`, and once it closed (an ended run, `fim serve` stopping,
    the connection ended or restarted, a timeout) the server's process group killed: the
    SDK closes a server's stdin and kills its group only if it outlives the grace period,
    so what a server that did exit left running (a helper, a browser, what `sh -c` or `npx`
    started) went on after fim (attack-54 F3). The SDK starts each server in a session of
    its own; a child that calls `setsid` itself leaves the group and is not reached.
    Synchronous, after the SDK's own (shielded) shutdown: no cancellation skips it."""
    groups: list[int] = []
    watchers: list[asyncio.Task[None]] = []
    stdio_groups.set(groups)  # read by `cap_stdio`'s factory, in this task's context
    stdio_watchers.set(watchers)
    try:
        async with transport as streams:
            yield streams
    finally:
        for watcher in watchers:
            watcher.cancel()
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left
                os.killpg(group, signal.SIGKILL)
