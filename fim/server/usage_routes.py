"""`GET /v1/usage`: tokens and cost per UTC day and agent (`?by=session`, per session;
`?by=key`, per key or tenant) from the state store (what `fim usage` prints), for
dashboards and chargeback: a key of a keyed server sees what its own runs spent, an
operator key (and `fim usage`) everything. Every caller hears the project's and the
agents' budgets (`budgets`: where each is declared, spent and left today, since those
limits stop its runs too); with `server.key_budget`, each key also hears its limits and
what it spent today against them, and with `server.key_limits` its run limits and how many
of its runs are going."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.server.http import JSONResponse, run_scope, session_owner
from fim.server.queries import UsageQuery, read_query

if TYPE_CHECKING:
    from fim.server.api import Api


def usage_handlers(api: Api) -> dict[str, Any]:
    """The handler of the `usage` area (`fim.server.areas.usage`)."""

    async def usage(request: Request) -> Response:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store
        from fim.store.usage import key_labels, summary

        query = read_query(request, UsageQuery)  # a misspelt `by` is a 400, never the default
        if isinstance(query, Response):
            return query
        by, agent = query.by, query.agent
        since = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=query.days - 1)).isoformat()
        owner = run_scope(request)  # a keyed caller: what its own runs spent
        store = get_store(api.services)
        snapshot = api.holder.current
        rows = await summary(store, since=since, agent=agent, owner=owner, by=by)
        if by == "key":  # a tenant by its name, a key by its place in fim.yaml
            labels = key_labels(snapshot.project.server)
            for row in rows:
                row["key"] = labels.get(row["key"]) or str(row["key"])[:12]
        body: dict[str, Any] = {"since": since, "usage": rows}
        me = session_owner(request)
        body["budgets"] = await budgets_left(snapshot, store, agent)
        budget = snapshot.project.server.key_budget
        if budget is not None and me:  # what this key may still spend today
            body["key_budget"] = await _status(store, budget, "fim.yaml", me=me)
        limits = snapshot.project.server.key_limits
        if limits is not None:  # every caller: "" is everyone on a server without keys
            body["key_limits"] = {
                "limits": limits.model_dump(exclude_none=True),
                "going": api.limits.going(me),
            }
        return JSONResponse(body)

    return {"usage": usage}


async def budgets_left(snapshot: Any, store: Any, agent: str | None) -> list[dict[str, Any]]:
    """The project's `budget:` and each agent's (only `agent`'s when named): their limits,
    where they are declared, and for the daily ones what was spent today and what is left
    (as recorded: runs going now count when they end)."""
    out = []
    if snapshot.project.budget is not None:
        status = await _status(store, snapshot.project.budget, "fim.yaml")
        out.append({"scope": "project", **status})
    for name, decl in sorted(snapshot.agents.items()):
        if decl.budget is None or (agent is not None and name != agent):
            continue
        where = snapshot.source("agent", name).path
        status = await _status(store, decl.budget, where, agent=name)
        out.append({"scope": "agent", "agent": name, **status})
    return out


async def _status(
    store: Any, budget: Any, declared_in: str, *, agent: str | None = None, me: str | None = None
) -> dict[str, Any]:
    """One budget as it stands today (UTC): its limits, where it is declared, what the runs
    it counts (of `agent`, of key `me`, or all) spent today and, per daily limit, what is
    left (never below zero)."""
    # deferred: loading fim.store costs a few ms
    from fim.store.usage import spent, utc_day

    day = utc_day(time.time())
    used = await spent(store, day, agent, me)
    status: dict[str, Any] = {
        "limits": budget.model_dump(exclude_none=True),
        "declared_in": declared_in,
        "day": day,
        "spent_today_tokens": used.total_tokens,
        "spent_today_cost_usd": used.cost,
    }
    if budget.max_tokens_per_day is not None:
        status["left_today_tokens"] = max(0, budget.max_tokens_per_day - used.total_tokens)
    if budget.max_cost_usd_per_day is not None:
        left = budget.max_cost_usd_per_day - (used.cost or 0.0)
        status["left_today_cost_usd"] = max(0.0, left)
    return status
