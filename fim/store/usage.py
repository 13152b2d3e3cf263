"""Token and cost accounting in the state store: one row per agent run (written when the run
finishes, by `fim.run.agent.run_agent`), summed per day and agent for `fim usage` and
`GET /v1/usage`. Days are UTC dates, so every replica and every shell agrees on them."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from fim.store.owners import owned_by
from fim.store.prepared import Prepared
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
    session: str | None = None,
) -> None:
    """Append the usage of one finished run (and, for a run of a session, its row in the
    session's account, in the same transaction).

    Written behind (`Store._write_behind`): on SQLite this returns before the commit, and
    the run's record, awaited right after, commits it in the same transaction (and raises
    if it could not be written); every later read of this process (a daily or session
    budget) comes after it all the same. On PostgreSQL it is committed when this returns."""
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
    rows = [("usage", row)]
    if session:
        counts = {k: row[k] for k in ("prompt_tokens", "completion_tokens", "cached_tokens")}
        rows.append(
            (
                "session_usage",
                {
                    "ts": ts,
                    "session": session[:200],
                    "run_id": row["run_id"],
                    "agent": row["agent"],
                    "cost": usage.cost,
                    **counts,
                },
            )
        )

    def write(conn: Any) -> None:
        for name, values in rows:
            _insert(name, values).execute(conn, [values])

    await store._write_behind(write, f"the usage of run {run_id}", run_id)


_INSERTS: dict[str, Prepared] = {}


def _insert(name: str, row: dict[str, Any]) -> Prepared:
    """One INSERT per table, compiled once (`fim.store.prepared`): building
    `insert().values(**row)` anew for every run cost ~0.6 ms of CPU in SQLAlchemy's
    statement construction and cache-key generation, three times the commit itself."""
    statement = _INSERTS.get(name)
    if statement is None:
        statement = _INSERTS[name] = Prepared(table(name).insert, list(row))
    return statement


async def summary(
    store: Store,
    *,
    since: str | None = None,
    agent: str | None = None,
    owner: str | None = None,
) -> list[dict[str, Any]]:
    """Runs, model calls, tokens and cost per (day, agent), newest day first; with `owner`,
    of the runs that caller started only (`fim.store.owners`). `cost` is None when no run
    of the group had a known price; `unpriced_runs` says how many lacked one."""
    # deferred: loading sqlalchemy costs hundreds of ms
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
    if owner is not None:
        query = query.where(usage.c.run_id.in_(owned_by(owner)))
    rows = await store._read(lambda conn: list(conn.execute(query).mappings()))
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


async def spent(
    store: Store, day: str, agent: str | None = None, owner: str | None = None
) -> Usage:
    """What finished runs spent on `day` (of one agent, or of all; with `owner`, of the runs
    that key started only): daily budgets."""
    return await _sum(store, "usage", "day", day, agent, owner)


async def session_spent(store: Store, session: str, agent: str | None = None) -> Usage:
    """What finished runs of a session spent (of one agent, or of all): session budgets."""
    return await _sum(store, "session_usage", "session", session[:200], agent)


async def _sum(
    store: Store, name: str, key: str, value: str, agent: str | None, owner: str | None = None
) -> Usage:
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func, select

    # deferred: loading pydantic_core costs tens of ms
    from fim.types import Usage

    usage = table(name)
    query = select(
        func.sum(usage.c.prompt_tokens),
        func.sum(usage.c.completion_tokens),
        func.sum(usage.c.cached_tokens),
        func.sum(usage.c.cost),
    ).where(usage.c[key] == value)
    if agent is not None:
        query = query.where(usage.c.agent == agent)
    if owner is not None:
        query = query.where(usage.c.run_id.in_(owned_by(owner)))
    row = await store._read(lambda conn: conn.execute(query).one())
    return Usage(
        prompt_tokens=int(row[0] or 0),
        completion_tokens=int(row[1] or 0),
        cached_tokens=int(row[2] or 0),
        cost=None if row[3] is None else float(row[3]),
    )
