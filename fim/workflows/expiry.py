"""Ending workflow runs whose human approval expired undecided.

A `human` node's approval has a deadline (the node's `timeout`, a week by default). Past
it the approval reads `expired` and nobody can decide it, but the run would stay `paused`,
its record and inputs kept forever (retention deletes only finished runs) and counted
against its key's paused runs (`fim.server.limits.check_parked`). `end_expired` records
each such run `cancelled`, saying which approval expired, and appends the end to its event
log; `retention.runs` then deletes it like any finished run. It runs as a step of
`fim.store.retention.prune` (handed in, as the queue's jobs are): hourly in `fim serve`,
and in `fim prune`. No scheduler of its own: a run ends within the hour after its deadline.

Each run is ended at most once, by whoever claims its approval's decision first
(`Approvals.claim_decision`, the claim a resume takes too): a `fim workflow resume` racing
with this either continues the run on the expiry or finds it already ended.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fim.events import ErrorEvent, WorkflowFinished
from fim.store.live import EventLog
from fim.store.schema import table
from fim.workflows.state import KIND

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.store import Store

BATCH = 500
"""Runs ended per pass at most (the next pass takes the rest)."""


def _expired(now: float) -> Any:
    """The workflow approvals past their deadline and not acted on, of runs still paused."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import and_, or_, select

    approvals, runs = table("approvals"), table("runs")
    paused = select(runs.c.id).where(runs.c.kind == KIND, runs.c.status == "paused")
    return (
        approvals.select()
        .where(
            approvals.c.kind == "workflow",
            approvals.c.consumed_at.is_(None),
            approvals.c.expires_at.is_not(None),
            approvals.c.expires_at <= now,
            or_(
                approvals.c.status == "pending",
                and_(approvals.c.status == "expired", approvals.c.resolved_by == "timeout"),
            ),
            approvals.c.run_id.in_(paused),
        )
        .order_by(approvals.c.expires_at)
        .limit(BATCH)
    )


def _expire(conn: Connection, approval_id: str, now: float) -> None:
    """Mark the approval expired at its deadline (as reading it past the deadline does),
    if it is still pending and past it at `now`."""
    approvals = table("approvals")
    conn.execute(
        approvals.update()
        .where(
            approvals.c.id == approval_id,
            approvals.c.status == "pending",
            approvals.c.expires_at <= now,
        )
        .values(status="expired", resolved_at=approvals.c.expires_at, resolved_by="timeout")
    )


def why(approval: dict[str, Any]) -> str:
    """The reason a run ended, as its record and its event log say it."""
    node = (approval.get("data") or {}).get("node") or "?"
    waited = float(approval["expires_at"]) - float(approval["created_at"])
    days = waited / 86_400
    span = f"{days:g} days" if days >= 1 else f"{waited:g} seconds"
    return (
        f"approval '{approval['id']}' of human node '{node}' expired undecided after {span} "
        "(the node's `timeout`)"
    )


async def end_expired(store: Store, now: float | None = None, dry_run: bool = False) -> int:
    """End (or with `dry_run`, count) the paused workflow runs whose human approval is
    past its deadline at `now`: each is recorded `cancelled` with the reason, its waiting
    node `cancelled` too, and `error` + `workflow_finished` events are appended to its
    log. Returns how many."""
    now = time.time() if now is None else now
    query = _expired(now)
    found = await store._read(lambda conn: [dict(r) for r in conn.execute(query).mappings()])
    if dry_run:
        return len(found)
    ended = 0
    for approval in found:
        approval_id = str(approval["id"])

        def expire(conn: Connection, approval_id: str = approval_id) -> None:
            _expire(conn, approval_id, now)

        await store._tx(expire)
        if not await store.claim_expiry(approval_id):  # decided meanwhile, or a resume acted
            continue
        record = await store.get_run(approval["run_id"])
        if record is None or record.status != "paused":
            continue
        reason = why(approval)
        extra: dict[str, Any] = {"finished_at": now}
        node = (approval.get("data") or {}).get("node")
        nodes = record.data.get("nodes")
        if isinstance(nodes, dict) and isinstance(nodes.get(node), dict):
            nodes = {**nodes, node: {**nodes[node], "status": "cancelled", "error": reason}}
            extra["nodes"] = nodes
        await store.record_cancelled(record, reason, **extra)
        log = EventLog(store, record.id, KIND, record.name, record=False)
        said = ErrorEvent(run_id=record.id, message=reason, kind="approval_expired")
        log.add(said.model_dump(mode="json"))
        end = WorkflowFinished(run_id=record.id, workflow=record.name, status="cancelled")
        log.add(end.model_dump(mode="json"))
        await log.close()
        ended += 1
    return ended


def expirer(store: Store) -> Callable[[float, bool], Awaitable[int]]:
    """`end_expired` on `store`, as `fim.store.retention.prune` takes it (`now`, dry run)."""

    async def expire(now: float, dry_run: bool) -> int:
        return await end_expired(store, now, dry_run)

    return expire
