"""One policy each for "only one process may use this" and "at most N at once here".

`hold`: an exclusive `flock` on a file, held as long as the returned handle stays open.
The kernel drops it when the process dies, even by SIGKILL, so there is never a stale lock
to clean up; the file names the holder's pid for the refusal message.

`slots`: the running event loop's semaphore for a key. An asyncio primitive belongs to the
loop it is first used on, and one process runs several loops (tests, `fim serve --workers`
threads, a CLI run after another), so each loop gets its own.

`share`: a tenant's share of a pool the whole process draws on (the worker processes of
`fim.tools.isolate`, the sandboxes): one API key holds at most half of it at once, so the
other keys always find the rest free of it, however many calls its runs make.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from contextvars import ContextVar
from pathlib import Path
from typing import IO

from fim import private

current_owner: ContextVar[str] = ContextVar("fim_run_owner", default="")
"""The key hash (`fim.store.owners`) of the run going on in this context, "" for none (no
keys, the CLI, an eval): the runs it starts (delegates) and its tool calls belong to it too,
its key's budget (`server.key_budget`) counts it and its key's `share` bounds it. Set by
`fim.run.agent` for a run and by the workflow scheduler for a node."""


def hold(path: Path, refuse: Callable[[str], Exception]) -> IO[str]:
    """Lock `path` for this process or raise `refuse(holder)`; keep the handle open."""

    private.parents(path)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise refuse(holder) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def slots(key: Hashable, size: int) -> asyncio.Semaphore:
    """The running loop's semaphore for `key`, made with `size` places the first time."""
    kept = _SLOTS.setdefault(asyncio.get_running_loop(), {})
    found = kept.get(key)
    if found is None:
        found = kept[key] = asyncio.Semaphore(size)
    return found


@contextlib.asynccontextmanager
async def share(pool: str, size: int) -> AsyncIterator[None]:
    """Wait, if need be, until the current key (`current_owner`) holds fewer than half of
    `pool`'s `size` places (at least one), and hold one for the block. Work no key started
    is not counted: without keys every run is the same tenant's."""
    owner = current_owner.get()
    if not owner:
        yield
        return
    async with slots((pool, "share", owner), max(1, size // 2)):
        yield


__all__ = ["current_owner", "hold", "share", "slots"]
