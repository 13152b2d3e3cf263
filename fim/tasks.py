"""Work a caller starts and does not wait for (a late usage row, a budget hold's update, a
server's housekeeping): each task is kept referenced until it ends, as asyncio asks (the
loop holds its tasks only weakly, so an unreferenced one can be collected mid-flight). The
one place fim does this; `RUNNING` lets a test wait for what is still going.

`shielded` is the other half: work that must end even when whoever awaits it is
cancelled (a place given back, a run's last record written)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

RUNNING: set[asyncio.Task[Any]] = set()
"""The tasks `spawn` started that have not ended."""


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """`coro` as a task of the running loop, kept until it ends."""
    task = asyncio.get_running_loop().create_task(coro)
    RUNNING.add(task)
    task.add_done_callback(RUNNING.discard)
    return task


async def shielded(work: Coroutine[Any, Any, T] | asyncio.Task[T]) -> T:
    """The result of `work` (a coroutine, started as a task of its own with `spawn`, or a
    task already started), which runs to its end even when the awaiting task is cancelled.

    A `finally` that gives something back must not be cut short by the cancellation it
    runs under: Starlette cancels a stream whose client left through an anyio cancel
    scope, which cancels every later await of the task again (level-triggered). Under
    such a scope the caller still waits for `work` (a shielded scope); a plain
    `Task.cancel()` leaves the caller at once (`asyncio.shield`) while `work` goes on."""
    # deferred: anyio costs ~10 ms to import, paid only where work is shielded
    import anyio

    task = work if isinstance(work, asyncio.Task) else spawn(work)
    with anyio.CancelScope(shield=True):
        done = await asyncio.shield(task)
    return done


__all__ = ["RUNNING", "shielded", "spawn"]
