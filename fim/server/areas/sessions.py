"""`/v1/sessions`: the caller's conversations, listed, read or forgotten."""

from __future__ import annotations

from fim.server import responses as r
from fim.server.area import Area, Endpoint, Op, get
from fim.server.queries import SessionsQuery, query_schema
from fim.server.session_routes import session_handlers

AREA = Area(
    "sessions",
    (
        get(
            "/v1/sessions",
            "list_sessions",
            Op(
                "The caller's sessions by name, the most recent first",
                "runs",
                r.SessionList,
                query=query_schema(SessionsQuery),
                errors=(400,),
            ),
        ),
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
