"""Deleting what the state store no longer needs, as fim.yaml's `retention:` says.

Every served run leaves a record, a dozen event rows and a usage row; every tool call an
audit row. Nothing else removes them, so a server that runs for months fills its disk.
`prune` deletes, in batches of `BATCH` rows per transaction (short locks, on SQLite as on
PostgreSQL), what is older than each kind's retention: finished runs with their event
logs and owners, decided approvals no run still waits on, audit and usage rows. A run
that is paused, queued or running, and an approval still pending, are never deleted,
however old. `fim serve` calls it hourly and `fim prune` on demand.

First, with `expire` (handed in from above: `fim.workflows.expiry.expirer`), the workflow
runs paused at a human node whose approval expired undecided are ended `cancelled`; they
are then finished runs like any other, deleted after `retention.runs`.

On PostgreSQL the job queue's finished jobs go after `retention.runs` too (`jobs`, handed
in by the caller that has the queue: `fim.workflows.queue_rows.prune_jobs`); procrastinate
alone keeps every job row forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.store.schema import table

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.config.schema import Retention
    from fim.store import Store

log = logging.getLogger("fim.store")

FINISHED = ("ok", "error", "failed", "cancelled", "max_iterations")
"""Run statuses after which nothing will read or resume the run."""
BATCH = 500
DAY = 86_400.0


@dataclass
class Pruned:
    """Rows deleted (or, for a dry run, that would be) per kind."""

    runs: int = 0
    events: int = 0
    approvals: int = 0
    audit: int = 0
    usage: int = 0
    transcripts: int = 0
    """Hook transcript files (`fim.private.transcripts`), kept as long as runs."""
    jobs: int | None = None
    """Finished job-queue rows (PostgreSQL), kept as long as runs; None: no queue here."""
    expired: int | None = None
    """Paused workflow runs ended because their approval expired (not deleted: ended);
    None: not asked to (no `expire`)."""

    def as_dict(self) -> dict[str, int]:
        return {name: value for name, value in asdict(self).items() if value is not None}


async def prune(
    store: Store,
    retention: Retention,
    *,
    now: float | None = None,
    dry_run: bool = False,
    transcripts: Path | None = None,
    jobs: Callable[[float, bool], Awaitable[int]] | None = None,
    expire: Callable[[float, bool], Awaitable[int]] | None = None,
) -> Pruned:
    """Delete (or with `dry_run`, count) what `retention` no longer keeps; with
    `transcripts`, the folder of the project's hook transcripts, those last written before
    the runs' cutoff too (each holds a whole conversation; one is written per run); with
    `jobs` (days, dry run -> count), the job queue's finished jobs older than the runs'
    retention (by the database's clock: `now` does not move it); with `expire` (now, dry
    run -> count), first the paused runs whose approval expired by `now` are ended."""
    now = time.time() if now is None else now
    done = Pruned()
    if expire is not None:
        done.expired = await expire(now, dry_run)

    def cutoff(days: float | None) -> float | None:
        return None if days is None else now - days * DAY

    async def each(work: Any) -> None:
        while True:
            counts = await (store._read(work) if dry_run else store._tx(work))
            for name, count in counts.items():
                setattr(done, name, getattr(done, name) + count)
            if dry_run or max(counts.values(), default=0) < BATCH:
                return

    if (runs := cutoff(retention.runs)) is not None:
        await each(lambda conn: _runs(conn, runs, dry_run))
        if transcripts is not None:
            done.transcripts = await asyncio.to_thread(_old_files, transcripts, runs, dry_run)
        if jobs is not None and retention.runs is not None:
            done.jobs = await jobs(retention.runs, dry_run)
    if (approvals := cutoff(retention.approvals)) is not None:
        await each(lambda conn: _approvals(conn, approvals, dry_run))
    if (audit := cutoff(retention.audit)) is not None:
        await each(lambda conn: _rows(conn, "audit", "audit", audit, dry_run))
    if (usage := cutoff(retention.usage)) is not None:
        await each(lambda conn: _rows(conn, "usage", "usage", usage, dry_run))
        await each(lambda conn: _rows(conn, "session_usage", "usage", usage, dry_run))
    return done


def _runs(conn: Connection, cutoff: float, dry_run: bool) -> dict[str, int]:
    """One batch of finished runs last updated before `cutoff`, with their events and
    owners."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func, select

    runs, events, owners = table("runs"), table("run_events"), table("run_owners")
    old = select(runs.c.id).where(runs.c.status.in_(FINISHED), runs.c.updated_at < cutoff)
    if dry_run:
        count = conn.execute(select(func.count()).select_from(old.subquery())).scalar() or 0
        logged = select(func.count()).where(events.c.run_id.in_(old))
        return {"runs": int(count), "events": int(conn.execute(logged).scalar() or 0)}
    # oldest first along the created_at index: a batch stops at BATCH rows, not at the end
    ids = list(conn.execute(old.order_by(runs.c.created_at).limit(BATCH)).scalars())
    if not ids:
        return {"runs": 0, "events": 0}
    deleted = conn.execute(events.delete().where(events.c.run_id.in_(ids))).rowcount
    conn.execute(owners.delete().where(owners.c.run_id.in_(ids)))
    conn.execute(runs.delete().where(runs.c.id.in_(ids)))
    return {"runs": len(ids), "events": int(deleted or 0)}


def _old_files(folder: Path, cutoff: float, dry_run: bool) -> int:
    """Delete (or count) the `*.jsonl` files of `folder` last written before `cutoff`."""
    count = 0
    for path in folder.glob("*.jsonl") if folder.is_dir() else ():
        with contextlib.suppress(FileNotFoundError):
            if path.lstat().st_mtime < cutoff:
                if not dry_run:
                    path.unlink()
                count += 1
    return count


def _approvals(conn: Connection, cutoff: float, dry_run: bool) -> dict[str, int]:
    """One batch of approvals decided (or expired) before `cutoff` whose run is not still
    paused, queued or running (a run resumed later reads its decision)."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func, select

    approvals, runs = table("approvals"), table("runs")
    waiting = select(runs.c.id).where(runs.c.status.not_in(FINISHED))
    old = select(approvals.c.id).where(
        approvals.c.status != "pending",
        func.coalesce(approvals.c.resolved_at, approvals.c.created_at) < cutoff,
        approvals.c.run_id.not_in(waiting),
    )
    return {"approvals": _delete(conn, approvals, old, dry_run)}


def _rows(conn: Connection, name: str, kind: str, cutoff: float, dry_run: bool) -> dict[str, int]:
    """One batch of `name` rows (audit, usage: a `ts` column) from before `cutoff`."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import select

    rows = table(name)
    # oldest first along the primary key (rows are appended in time order): a batch reads
    # about BATCH rows, where `ts` has no index (usage)
    old = select(rows.c.id).where(rows.c.ts < cutoff).order_by(rows.c.id)
    return {kind: _delete(conn, rows, old, dry_run)}


def _delete(conn: Connection, rows: Any, old: Any, dry_run: bool) -> int:
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func, select

    if dry_run:
        return int(conn.execute(select(func.count()).select_from(old.subquery())).scalar() or 0)
    ids = list(conn.execute(old.limit(BATCH)).scalars())
    if ids:
        conn.execute(rows.delete().where(rows.c.id.in_(ids)))
    return len(ids)


PRUNE_EVERY = 3600.0
FIRST_PRUNE = 60.0
"""Seconds after start-up (a server starting is busy enough) and between two prunes."""


async def prune_periodically(
    store: Callable[[], Store],
    retention: Callable[[], Retention],
    stop: asyncio.Event,
    *,
    first: float = FIRST_PRUNE,
    every: float = PRUNE_EVERY,
    transcripts: Callable[[], Path] | None = None,
    jobs: Callable[[float, bool], Awaitable[int]] | None = None,
    expire: Callable[[float, bool], Awaitable[int]] | None = None,
) -> None:
    """`prune` `first` seconds from now and then every `every` seconds until `stop` is
    set, with the retention of the snapshot current at each pass (a reload changes it).
    A failure is logged and retried at the next pass, never raised: a server keeps serving
    when its store cannot be pruned."""
    delay = first
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), delay)
            return
        except TimeoutError:
            pass
        delay = every
        try:
            folder = transcripts() if transcripts is not None else None
            pruned = await prune(store(), retention(), transcripts=folder, jobs=jobs, expire=expire)
        except Exception:
            log.exception("pruning the state store failed; trying again in %.0f s", every)
            continue
        if any(pruned.as_dict().values()):
            log.info("pruned the state store (fim.yaml `retention:`): %s", pruned.as_dict())
