"""Token and cost accounting in the state store: one row per agent run (written when the run
finishes, by `fim.run.agent.run_agent`), summed per day and agent for `fim usage` and
`GET /v1/usage`. Days are UTC dates, so every replica and every shell agrees on them."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from fim.store.owners import key_owner, owned_by
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


GROUPS = ("agent", "session", "key")
"""What `summary` sums by: (day, agent), session, or the key (tenant) that started the runs."""


async def summary(
    store: Store,
    *,
    since: str | None = None,
    agent: str | None = None,
    owner: str | None = None,
    by: str = "agent",
) -> list[dict[str, Any]]:
    """Runs, model calls, tokens and cost per (day, agent), newest day first; with `owner`,
    of the runs that caller started only (`fim.store.owners`). `cost` is None when no run
    of the group had a known price; `unpriced_runs` says how many lacked one.

    `by="session"` sums per session instead (the runs that continued one; `name` is the
    caller's name for it, `day` the last day it spent), most expensive first; `by="key"`
    per owner hash of the key (or tenant) that started the runs, None for runs no key
    started (the CLI, a server without keys): the surfaces name them."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import and_, case, func, select

    if by not in GROUPS:
        raise ValueError(f"by: one of {', '.join(GROUPS)}, got {by!r}")
    usage = table("usage")
    sums = (
        func.count().label("runs"),
        func.sum(usage.c.calls).label("calls"),
        func.sum(usage.c.prompt_tokens).label("prompt_tokens"),
        func.sum(usage.c.completion_tokens).label("completion_tokens"),
        func.sum(usage.c.cached_tokens).label("cached_tokens"),
        func.sum(usage.c.cost).label("cost"),
        func.sum(case((usage.c.cost.is_(None), 1), else_=0)).label("unpriced_runs"),
    )
    keys: tuple[str, ...]
    if by == "session":
        in_session, sessions = table("session_usage"), table("sessions")
        query = (
            select(
                in_session.c.session,
                func.max(sessions.c.name).label("name"),
                func.max(usage.c.day).label("day"),
                *sums,
            )
            .select_from(
                usage.join(
                    in_session,
                    and_(
                        in_session.c.run_id == usage.c.run_id,
                        in_session.c.agent == usage.c.agent,
                    ),
                ).outerjoin(sessions, sessions.c.id == in_session.c.session)
            )
            .group_by(in_session.c.session)
            .order_by(func.sum(usage.c.prompt_tokens + usage.c.completion_tokens).desc())
        )
        keys = ("session", "name", "day")
    elif by == "key":
        owners = table("run_owners")
        query = (
            select(owners.c.owner.label("key"), *sums)
            .select_from(usage.outerjoin(owners, owners.c.run_id == usage.c.run_id))
            .group_by(owners.c.owner)
            .order_by(func.sum(usage.c.prompt_tokens + usage.c.completion_tokens).desc())
        )
        keys = ("key",)
    else:
        query = (
            select(usage.c.day, usage.c.agent, *sums)
            .group_by(usage.c.day, usage.c.agent)
            .order_by(usage.c.day.desc(), usage.c.agent)
        )
        keys = ("day", "agent")
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
                **{k: row[k] for k in keys},
                **item,
                "cost": None if cost is None else float(cost),
            }
        )
    return out


async def session_totals(store: Store, sessions: list[str]) -> dict[str, Usage]:
    """What the runs of each of `sessions` spent (`fim sessions list`); a session that
    spent nothing is absent."""
    return await _totals(store, "session_usage", "session", [s[:200] for s in sessions])


async def run_totals(store: Store, run_ids: list[str]) -> dict[str, Usage]:
    """What each of `run_ids` spent (`fim runs list`): its own row, and a workflow run's
    `llm` nodes' rows (its delegates and agent nodes are runs of their own)."""
    return await _totals(store, "usage", "run_id", [r[:64] for r in run_ids])


async def _totals(store: Store, name: str, key: str, values: list[str]) -> dict[str, Usage]:
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func, select

    # deferred: loading pydantic_core costs tens of ms
    from fim.types import Usage

    if not values:
        return {}
    usage = table(name)
    query = (
        select(
            usage.c[key],
            func.sum(usage.c.prompt_tokens),
            func.sum(usage.c.completion_tokens),
            func.sum(usage.c.cached_tokens),
            func.sum(usage.c.cost),
        )
        .where(usage.c[key].in_(values))
        .group_by(usage.c[key])
    )
    rows = await store._read(lambda conn: list(conn.execute(query)))
    return {
        row[0]: Usage(
            prompt_tokens=int(row[1] or 0),
            completion_tokens=int(row[2] or 0),
            cached_tokens=int(row[3] or 0),
            cost=None if row[4] is None else float(row[4]),
        )
        for row in rows
    }


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


def key_labels(settings: Any) -> dict[str | None, str]:
    """How `summary(by="key")` names each owner hash of the server settings `settings`:
    a tenant by its name (its keys' `name`s beside it), a key by its `name` or its place in
    fim.yaml (never the key), and None as the runs no key started. A hash not here is a key
    removed since (shown shortened)."""
    labels: dict[str | None, str] = {None: "(no key)"}
    names: dict[str, list[str]] = {}  # a tenant's keys' names, shown beside the tenant
    for i, key in enumerate(settings.api_keys):
        token, tenant = (key, "") if isinstance(key, str) else (key.key, key.tenant)
        name = None if isinstance(key, str) else key.name
        if token:
            owner = key_owner(token.encode(), tenant)
            if tenant:
                names.setdefault(owner, [])
                if name and name not in names[owner]:
                    names[owner].append(name)
                shown = ", ".join(names[owner])
                labels[owner] = f"tenant {tenant}" + (f" ({shown})" if shown else "")
            else:
                labels[owner] = name or f"server.api_keys[{i}]"
    for i, key in enumerate(settings.operator_keys):
        if key:
            labels[key_owner(key.encode())] = f"server.operator_keys[{i}]"
    return labels
