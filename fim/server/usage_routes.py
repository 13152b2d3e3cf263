"""`GET /v1/usage`: tokens and cost per UTC day and agent from the state store (what `fim
usage` prints), for dashboards and chargeback: a key of a keyed server sees what its own
runs spent, an operator key (and `fim usage`) everything; with `server.key_budget`, each
key also hears its limits and what it spent today against them, and with
`server.key_limits` its run limits and how many of its runs are going."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.server.http import JSONResponse, query_int, run_scope, session_owner

if TYPE_CHECKING:
    from fim.server.api import Api

MAX_DAYS = 36500


def usage_handlers(api: Api) -> dict[str, Any]:
    """The handler of the `usage` area (`fim.server.areas.usage`)."""

    async def usage(request: Request) -> Response:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store
        from fim.store.usage import spent, summary, utc_day

        days = query_int(request, "days", 7, 1, MAX_DAYS)
        if isinstance(days, Response):
            return days
        agent = request.query_params.get("agent") or None
        since = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days - 1)).isoformat()
        owner = run_scope(request)  # a keyed caller: what its own runs spent
        store = get_store(api.services)
        rows = await summary(store, since=since, agent=agent, owner=owner)
        body: dict[str, Any] = {"since": since, "usage": rows}
        budget = api.holder.current.project.server.key_budget
        me = session_owner(request)
        if budget is not None and me:  # what this key may still spend today
            day = utc_day(time.time())
            used = await spent(store, day, None, me)
            body["key_budget"] = {
                "limits": budget.model_dump(exclude_none=True),
                "day": day,
                "spent_today_tokens": used.total_tokens,
                "spent_today_cost_usd": used.cost,
            }
        limits = api.holder.current.project.server.key_limits
        if limits is not None:  # every caller: "" is everyone on a server without keys
            body["key_limits"] = {
                "limits": limits.model_dump(exclude_none=True),
                "going": api.limits.going(me),
            }
        return JSONResponse(body)

    return {"usage": usage}
