"""Liveness, readiness and the snapshot's status."""

from __future__ import annotations

from fim.server import responses as r
from fim.server.agent_routes import status_handlers
from fim.server.area import Area, Op, get

AREA = Area(
    "status",
    (
        # probes may add parameters of their own: ignored on these two
        get(
            "/healthz",
            "healthz",
            Op("Liveness (no key needed)", "status", r.Health),
            extra_query=True,
        ),
        get(
            "/readyz",
            "readyz",
            Op(
                "Readiness: the state store answers (no key needed)",
                "status",
                r.Health,
                errors=(503,),
            ),
            extra_query=True,
        ),
        get(
            "/v1/status",
            "status",
            Op("Snapshot version and the last reload error", "status", r.Status),
        ),
    ),
    status_handlers,
)
