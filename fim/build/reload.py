"""Hot reload: watch the project, recompile in the background, swap the snapshot atomically.

The holder only ever points at a snapshot that compiled. A bad change leaves the last good
one serving and records the problems for `/v1/status` and the log; a run keeps the
snapshot object it started with, so a swap never changes a run in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fim.build.snapshot import Snapshot
from fim.errors import ConfigError, Problem
from fim.observe import record_reload

log = logging.getLogger("fim.build.reload")

_IGNORED_DIRS = {
    ".git",
    ".fim",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    ".venv",
    ".cassettes",
}


@dataclass
class SnapshotHolder:
    """The one mutable thing in a server: a reference to the current snapshot."""

    current: Snapshot
    errors: list[Problem] = field(default_factory=list)
    error_at: float | None = None
    reloads: int = 0
    listeners: list[Callable[[Snapshot, Snapshot], object]] = field(default_factory=list)

    def swap(self, new: Snapshot) -> None:
        old, self.current = self.current, new
        self.errors, self.error_at = [], None
        record_reload(True)
        self.reloads += 1
        for listener in self.listeners:
            listener(old, new)

    def fail(self, problems: list[Problem]) -> None:
        self.errors, self.error_at = problems, time.time()
        record_reload(False)


def _watch_filter(change: object, path: str) -> bool:
    parts = Path(path).parts
    if any(part in _IGNORED_DIRS for part in parts):
        return False
    name = parts[-1] if parts else ""
    return not (name.endswith(("~", ".swp", ".tmp", ".pyc")) or name.startswith(".#"))


async def reload_once(root: Path, holder: SnapshotHolder) -> bool:
    """Recompile `root` off the event loop; swap on success, keep the old one on failure."""
    # deferred: loading fim.config.loader costs tens of ms
    from fim.build.compile import compile_project

    started = time.perf_counter()
    try:
        snapshot = await asyncio.to_thread(compile_project, root)
    except ConfigError as exc:
        holder.fail(exc.problems)
        for problem in exc.problems:
            log.warning("reload rejected, still serving %s: %s", holder.current.version, problem)
        return False
    except Exception as exc:  # a compiler bug must not take the server down either
        holder.fail([Problem("fim.yaml", 1, 1, f"reload failed: {type(exc).__name__}: {exc}")])
        log.exception("reload failed, still serving %s", holder.current.version)
        return False
    if snapshot.version == holder.current.version and not holder.errors:
        return False
    holder.swap(snapshot)
    log.info(
        "reloaded snapshot %s in %.0f ms", snapshot.version, (time.perf_counter() - started) * 1000
    )
    return True


async def watch(
    root: Path,
    holder: SnapshotHolder,
    *,
    debounce_ms: int = 20,
    step_ms: int = 5,
    stop: asyncio.Event | None = None,
) -> None:
    """Reload on every (debounced) batch of file changes until `stop` is set.

    watchfiles yields a batch once `step_ms` passes without a new change (at most
    `debounce_ms` after the first), so a save is seen 1-2 steps after it lands: 5 ms
    steps answer a save in ~8 ms where 10 ms steps took ~17, for ~1 ms of CPU a second
    more while idle."""
    # deferred: loading watchfiles costs a few ms
    from watchfiles import awatch

    async for _changes in awatch(
        root,
        watch_filter=_watch_filter,
        debounce=debounce_ms,
        step=step_ms,
        stop_event=stop,
        recursive=True,
    ):
        await reload_once(root, holder)
