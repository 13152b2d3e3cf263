"""`GET /v1/usage`: tokens and cost per UTC day and agent."""

from __future__ import annotations

from fim.server import responses as r
from fim.server.area import Area, Op, get
from fim.server.queries import UsageQuery, query_schema
from fim.server.usage_routes import usage_handlers

AREA = Area(
    "usage",
    (
        get(
            "/v1/usage",
            "usage",
            Op(
                "Tokens and cost per UTC day and agent, from the state store",
                "status",
                r.UsageReport,
                query=query_schema(UsageQuery),
                errors=(400,),
            ),
        ),
    ),
    usage_handlers,
)
