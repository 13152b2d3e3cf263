"""Work a caller starts and does not wait for (a late usage row, a budget hold's update, a
server's housekeeping): each task is kept referenced until it ends, as asyncio asks (the
loop holds its tasks only weakly, so an unreferenced one can be collected mid-flight). The
one place fim does this; `RUNNING` lets a test wait for what is still going."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

RUNNING: set[asyncio.Task[Any]] = set()
"""The tasks `spawn` started that have not ended."""


def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """`coro` as a task of the running loop, kept until it ends."""
    task = asyncio.get_running_loop().create_task(coro)
    RUNNING.add(task)
    task.add_done_callback(RUNNING.discard)
    return task
