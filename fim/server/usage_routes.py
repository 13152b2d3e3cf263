"""`GET /v1/usage`: tokens and cost per UTC day and agent from the state store (what `fim
usage` prints), for dashboards and chargeback: a key of a keyed server sees what its own
runs spent, an operator key (and `fim usage`) everything."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.server.http import JSONResponse, query_int, run_scope

if TYPE_CHECKING:
    from fim.server.api import Api

MAX_DAYS = 36500


def usage_handlers(api: Api) -> dict[str, Any]:
    """The handler of the `usage` area (`fim.server.areas.usage`)."""

    async def usage(request: Request) -> Response:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store
        from fim.store.usage import summary

        days = query_int(request, "days", 7, 1, MAX_DAYS)
        if isinstance(days, Response):
            return days
        agent = request.query_params.get("agent") or None
        since = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days - 1)).isoformat()
        owner = run_scope(request, api.holder)  # a keyed caller: what its own runs spent
        rows = await summary(get_store(api.services), since=since, agent=agent, owner=owner)
        return JSONResponse({"since": since, "usage": rows})

    return {"usage": usage}
