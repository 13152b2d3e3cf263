"""One run and its event stream, from any replica (see `fim.server.live_routes`)."""

from __future__ import annotations

from fim.server import responses as r
from fim.server.area import Area, Op, get, post
from fim.server.live_routes import live_handlers
from fim.server.queries import EventsQuery, query_schema

AREA = Area(
    "live",
    (
        get(
            "/v1/runs/{run_id}",
            "get_run",
            Op(
                "One run with its trace (a workflow run with each node's state)",
                "runs",
                r.RunDetail,
                errors=(404, 429),  # 429: the key reads 16 runs' events already
            ),
        ),
        get(
            "/v1/runs/{run_id}/events",
            "run_events",
            Op(
                "A run's events, stored then live, from any replica, until its last event",
                "runs",
                stream="`id: <seq>`, `event: <type>`, `data:` the event (see fim.events); ends "
                "with `run_finished` or `workflow_finished`; resume with `Last-Event-ID` or "
                "`?after=<seq>`",
                query=query_schema(EventsQuery),
                errors=(400, 404, 429),  # 429: the key follows 16 runs already
            ),
        ),
        post(
            "/v1/runs/{run_id}/cancel",
            "cancel_run",
            Op(
                "Stop a background run (in this server's process or on a worker)",
                "runs",
                r.RunCancelled,
                errors=(404, 409),
            ),
        ),
    ),
    live_handlers,
)
