"""Limits as procrastinate locks: the lanes a queued job takes (`fim.workflows.durable`).

procrastinate runs the jobs that share a `lock` one after another, in the order they were
queued, whichever worker takes them. A limit of N is N such lanes: an agent's or
workflow's `concurrency`, a key's `server.key_limits.max_parallel_runs`. fim writes no
lease and no queue of its own; it only picks the lane.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import procrastinate


async def job_lock(
    app: procrastinate.App,
    run_id: str,
    kind: str,
    name: str,
    limit: int | None,
    owner: str = "",
    key_limit: int | None = None,
) -> str:
    """The procrastinate `lock` of a new job of run `run_id`.

    - the agent or workflow has a `concurrency` limit: one of its lanes, and, when the
      server limits each key (`key_limit`), one of the at most `key_limit` lanes that are
      the key's share of them: the name's limit holds for every key together, and one key
      never runs more than `key_limit` of it at once;
    - only the key is limited: one of the key's own `key_limit` lanes (`fim:key:<owner>:i`;
      "open" for a server without keys, whose callers share one limit): at most that many
      of the key's jobs run at once on all workers, and the other keys' jobs are never
      queued behind them (a lane is FIFO, lanes are not);
    - no limit: the run id, which only keeps two workers off one run.

    procrastinate allows one lock per job, so a key's runs of names that each have their own
    `concurrency` are bounded per name, not together (docs/security.md).
    """
    if limit:
        share = (owner, key_limit) if key_limit else None
        return await lane_lock(app, kind, name, limit, share)
    if key_limit:
        return await lane_lock(app, "key", owner or "open", key_limit)
    return run_id


async def lane_lock(
    app: procrastinate.App,
    kind: str,
    name: str,
    limit: int,
    share: tuple[str, int] | None = None,
) -> str:
    """The procrastinate `lock` of a new job of an agent or workflow (or key) limited to
    `limit` runs at once.

    procrastinate runs the jobs sharing a lock one after another, in the order they were
    queued, whichever worker takes them. A limit of N is N such lanes
    (`fim:<kind>:<name>:<i>`): at most N jobs of the name run at once, anywhere. The new
    job joins the lane with the fewest unfinished jobs; a race between two deferrers only
    makes lanes uneven, never exceeds the limit (that is procrastinate's lock).

    `share=(owner, most)`: the job may take only `most` of the N lanes, the same ones for
    every job of `owner` (picked from a hash of it, so two deferrers cannot disagree), which
    keeps the owner to `most` of them at once.
    """
    lanes = [f"fim:{kind}:{name}:{i}" for i in range(limit)]
    if share is not None:
        owner, most = share
        start = int(hashlib.sha256(owner.encode()).hexdigest()[:8], 16) % limit
        lanes = [lanes[(start + j) % limit] for j in range(min(most, limit))]
    rows = await app.connector.execute_query_all_async(
        "SELECT lock, count(*) AS n FROM procrastinate_jobs "
        "WHERE lock = ANY(%(lanes)s) AND status IN ('todo', 'doing') GROUP BY lock",
        lanes=lanes,
    )
    load = {row["lock"]: row["n"] for row in rows}
    return min(lanes, key=lambda lane: (load.get(lane, 0), lanes.index(lane)))


async def last_lane(app: procrastinate.App, run_id: str) -> str | None:
    """The lane (`job_lock`) run `run_id`'s latest job took, if it took one: the job that
    continues a paused run goes back to it, so the key's and the workflow's limits that
    chose it still hold (whoever decided, wherever)."""
    rows = await app.connector.execute_query_all_async(
        "SELECT lock FROM procrastinate_jobs WHERE queueing_lock = %(run)s "
        "ORDER BY id DESC LIMIT 1",
        run=run_id,
    )
    lock = rows[0]["lock"] if rows else None
    return lock if isinstance(lock, str) and lock.startswith("fim:") else None


__all__ = ["job_lock", "lane_lock", "last_lane"]
