"""`GET /v1/usage`: tokens and cost per UTC day and agent."""

from __future__ import annotations

from fim.server import responses as r
from fim.server.area import Area, Op, get
from fim.server.usage_routes import MAX_DAYS, usage_handlers

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
                query={
                    "days": {"type": "integer", "minimum": 1, "maximum": MAX_DAYS, "default": 7},
                    "agent": {"type": "string"},
                    "by": {"type": "string", "enum": ["agent", "session", "key"]},
                },
                errors=(400,),
            ),
        ),
    ),
    usage_handlers,
)
