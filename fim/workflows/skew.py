"""Which snapshot a worker runs a queued job on: never one older than the job's.

A job carries the snapshot its server accepted it under (`accepted`: the version, and the
project folder it was compiled from, `origin`). A server that reloaded `read_only: true`,
a hook, a lower budget or a revoked key accepts jobs under that snapshot; a worker still on
an older one must not run them, or what the operator locked down holds only in the
foreground (attack-17 #2).

A worker runs a job on its current snapshot when that snapshot is not older than the
job's, which it knows in one of three ways:

1. it is the job's version;
2. `--git`: the job's commit is an ancestor of the worker's;
3. `-p`: the worker just compiled the very folder the job was accepted from (same host,
   same path) without a problem: the files as they are now, read after the job existed.

"This worker held the job's version before and has moved on since" is not one of them
(attack-18 #4): a version is a digest of content, and content comes back. A lock-down that
is reverted and re-applied (A, B, A, B) makes the server accept under B while a worker whose
watcher has not fired yet is on A, having held B before; a force-push back and forth does
the same under `--git`. Nor does "held before" order versions the worker did not see: the
server may have gone A, B, A while the worker went A, B only. Rule 3 already covers the
same-folder worker that moved on (at the cost of a recompile), rule 2 the `--git` one.

Otherwise it brings its snapshot up to date (`refresh`: a recompile of `-p DIR`, a `git
fetch` with `--git`) and asks again, with backoff, for up to `wait` seconds; then the run
fails with `snapshot skew: ...` rather than run on a snapshot that may be older. Versions
are digests of the files, so without one of these facts "different" cannot be told from
"older": failing closed is the rule.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.errors import RunError

if TYPE_CHECKING:
    from fim.build.reload import SnapshotHolder
    from fim.build.snapshot import Snapshot

log = logging.getLogger("fim.worker")

SKEW = "snapshot skew"
"""How every such failure starts: an operator greps for it."""


def origin_of(root: Path) -> str:
    """Where a snapshot was compiled from: this host and the project folder."""
    return f"{socket.gethostname()}:{Path(root).resolve()}"


def accepted_under(snapshot: Snapshot) -> dict[str, str]:
    """What a job records of the snapshot that accepted it (JSON, no secrets)."""
    return {"snapshot": snapshot.version, "origin": origin_of(snapshot.root)}


async def _no_refresh() -> bool:
    return False


async def _not_known(_older: str, _newer: str) -> bool:
    return False


@dataclass
class WorkerSnapshots:
    """A worker's snapshot holder and how to tell whether it may run a given job.

    `refresh` brings the holder up to date and says whether the holder now matches its
    source (a compile without problems, a fetch that worked); `descends` says whether one
    version is known to come after another (`--git`: commit ancestry)."""

    holder: SnapshotHolder
    refresh: Callable[[], Awaitable[bool]] = _no_refresh
    descends: Callable[[str, str], Awaitable[bool]] = _not_known
    origin: str = ""
    wait: float = 60.0
    first_step: float = 0.25

    async def _may_run(self, version: str, origin: str | None, fresh: bool) -> bool:
        current = self.holder.current.version
        if current == version:
            return True
        if await self.descends(version, current):
            return True
        return fresh and bool(origin) and origin == self.origin

    async def for_job(self, accepted: dict[str, Any] | None) -> Snapshot:
        """The snapshot to run a job accepted under `accepted` on; `RunError` (snapshot
        skew) when no snapshot this worker reaches within `wait` seconds is known to be
        the job's or newer. A job without `accepted` (queued by an older fim, or by the
        CLI, which compiles nothing) runs on the current one."""
        version = str((accepted or {}).get("snapshot") or "")
        origin = (accepted or {}).get("origin")
        if not version or await self._may_run(version, origin, fresh=False):
            return self.holder.current
        deadline = time.monotonic() + self.wait
        step = self.first_step
        while True:
            fresh = await self.refresh()
            if await self._may_run(version, origin, fresh):
                return self.holder.current
            left = deadline - time.monotonic()
            if left <= 0:
                break
            log.info(
                "a job accepted on snapshot %s waits for this worker (on %s) to reach it",
                version,
                self.holder.current.version,
            )
            await asyncio.sleep(min(step, left))
            step = min(step * 2, 5.0)
        raise skew_error(version, origin, self.holder.current.version, self.origin, self.wait)


def skew_error(
    version: str, origin: Any, current: str, here: str, waited: float | None
) -> RunError:
    """The error a run that was not run for snapshot skew ends with."""
    where = f" (from {origin})" if origin else ""
    within = f" within {waited:g} s" if waited is not None else ""
    return RunError(
        f"{SKEW}: the run was accepted on snapshot {version}{where}; this worker has "
        f"{current}{f' (from {here})' if here else ''} and did not reach it{within}, so it "
        "was not run on what may be an older fim.yaml",
        hint="give every worker the server's project (the same folder, or --git on the same "
        "ref) and let it reload (no --no-reload); then submit the run again",
    )


async def check(
    snapshot: Snapshot,
    accepted: dict[str, Any] | None,
    resolve: Callable[[dict[str, Any] | None], Awaitable[Snapshot]] | None,
) -> Snapshot:
    """The snapshot a job runs on: `resolve`'s answer where the caller can reload
    (`WorkerSnapshots.for_job`), else `snapshot` only if it is the job's own version."""
    if resolve is not None:
        return await resolve(accepted)
    version = str((accepted or {}).get("snapshot") or "")
    if version and version != snapshot.version:
        raise skew_error(version, (accepted or {}).get("origin"), snapshot.version, "", None)
    return snapshot
