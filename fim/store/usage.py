"""Token and cost accounting in the state store: one row per agent run (written when the run
finishes, by `fim.run.agent.run_agent`), summed per day and agent for `fim usage` and
`GET /v1/usage`. Days are UTC dates, so every replica and every shell agrees on them."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from fim.store.schema import table

if TYPE_CHECKING:
    from fim.store import Store
    from fim.types import Usage


_COUNTS = ("runs", "calls", "prompt_tokens", "completion_tokens", "cached_tokens", "unpriced_runs")


def utc_day(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).date().isoformat()


async def record(
    store: Store,
    *,
    run_id: str,
    agent: str,
    model: str,
    status: str,
    calls: int,
    usage: Usage,
    ts: float | None = None,
) -> None:
    """Append the usage of one finished run."""
    ts = time.time() if ts is None else ts
    row = {
        "ts": ts,
        "day": utc_day(ts),
        "run_id": run_id[:64],
        "agent": agent[:200],
        "model": model[:200],
        "status": status[:16],
        "calls": calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_tokens,
        "cost": usage.cost,
    }
    await store._tx(lambda conn: conn.execute(table("usage").insert().values(**row)))


async def summary(
    store: Store, *, since: str | None = None, agent: str | None = None
) -> list[dict[str, Any]]:
    """Runs, model calls, tokens and cost per (day, agent), newest day first. `cost` is None
    when no run of the group had a known price; `unpriced_runs` says how many lacked one."""
    from sqlalchemy import case, func, select

    usage = table("usage")
    query = (
        select(
            usage.c.day,
            usage.c.agent,
            func.count().label("runs"),
            func.sum(usage.c.calls).label("calls"),
            func.sum(usage.c.prompt_tokens).label("prompt_tokens"),
            func.sum(usage.c.completion_tokens).label("completion_tokens"),
            func.sum(usage.c.cached_tokens).label("cached_tokens"),
            func.sum(usage.c.cost).label("cost"),
            func.sum(case((usage.c.cost.is_(None), 1), else_=0)).label("unpriced_runs"),
        )
        .group_by(usage.c.day, usage.c.agent)
        .order_by(usage.c.day.desc(), usage.c.agent)
    )
    if since is not None:
        query = query.where(usage.c.day >= since)
    if agent is not None:
        query = query.where(usage.c.agent == agent)
    rows = await store._tx(lambda conn: list(conn.execute(query).mappings()))
    out = []
    for row in rows:
        item = {k: int(row[k] or 0) for k in _COUNTS}
        item["total_tokens"] = item["prompt_tokens"] + item["completion_tokens"]
        cost = row["cost"]
        out.append(
            {
                "day": row["day"],
                "agent": row["agent"],
                **item,
                "cost": None if cost is None else float(cost),
            }
        )
    return out


async def spent(store: Store, day: str, agent: str | None = None) -> Usage:
    """What finished runs spent on `day` (of one agent, or of all): daily budgets."""
    from sqlalchemy import func, select

    from fim.types import Usage

    usage = table("usage")
    query = select(
        func.sum(usage.c.prompt_tokens),
        func.sum(usage.c.completion_tokens),
        func.sum(usage.c.cached_tokens),
        func.sum(usage.c.cost),
    ).where(usage.c.day == day)
    if agent is not None:
        query = query.where(usage.c.agent == agent)
    row = await store._tx(lambda conn: conn.execute(query).one())
    return Usage(
        prompt_tokens=int(row[0] or 0),
        completion_tokens=int(row[1] or 0),
        cached_tokens=int(row[2] or 0),
        cost=None if row[3] is None else float(row[3]),
    )
