"""One policy each for "only one process may use this" and "at most N at once here".

`hold`: an exclusive `flock` on a file, held as long as the returned handle stays open.
The kernel drops it when the process dies, even by SIGKILL, so there is never a stale lock
to clean up; the file names the holder's pid for the refusal message.

`slots`: the running event loop's semaphore for a key. An asyncio primitive belongs to the
loop it is first used on, and one process runs several loops (tests, `fim serve --workers`
threads, a CLI run after another), so each loop gets its own.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import weakref
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import IO


def hold(path: Path, refuse: Callable[[str], Exception]) -> IO[str]:
    """Lock `path` for this process or raise `refuse(holder)`; keep the handle open."""

    path.parent.mkdir(parents=True, exist_ok=True)
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


__all__ = ["hold", "slots"]
