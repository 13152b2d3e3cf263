"""`/v1/sessions/{session_id}`: one of the caller's conversations, read or forgotten."""

from __future__ import annotations

from fim.server import responses as r
from fim.server.area import Area, Endpoint, Op
from fim.server.session_routes import session_handlers

AREA = Area(
    "sessions",
    (
        Endpoint(
            "/v1/sessions/{session_id:path}",
            "session",
            {
                "GET": Op(
                    "The conversation a session_id names, the caller's own",
                    "runs",
                    r.SessionRecord,
                    errors=(400, 404),
                ),
                "DELETE": Op(
                    "Forget the conversation a session_id names, the caller's own",
                    "runs",
                    r.SessionDeleted,
                    errors=(400, 404),
                ),
            },
        ),
    ),
    session_handlers,
)
