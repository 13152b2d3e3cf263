"""Process-lifetime advisory locks: one policy for "only one process may use this".

An exclusive `flock` on a file, held as long as the returned handle stays open. The kernel
drops it when the process dies, even by SIGKILL, so there is never a stale lock to clean
up; the file names the holder's pid for the refusal message.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
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


__all__ = ["hold"]
