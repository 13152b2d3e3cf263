"""Agent runs: start one (a session continues a conversation), list them, run one again
(one run and its events are the `live` area)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.server import bodies
from fim.server import responses as r
from fim.server.agent_routes import run_handlers
from fim.server.area import Area, Op, get, post
from fim.server.queries import RunsQuery, query_schema
from fim.server.rerun_routes import rerun_handlers

if TYPE_CHECKING:
    from fim.server.api import Api


def _handlers(api: Api) -> dict[str, Any]:
    return {**run_handlers(api), **rerun_handlers(api)}


AREA = Area(
    "runs",
    (
        post(
            "/v1/agents/{name}/runs",
            "create_run",
            Op(
                "Run an agent (a session continues a conversation)",
                "runs",
                r.RunResult,
                bodies.RunBody,
                stream="with `stream: true`: one event per engine event (`event: <type>`, "
                "`data:` the event as JSON; see fim.events), ending with `run_finished`",
                errors=(400, 404, 499, 500, 503),
                background=True,
                runs=True,
            ),
        ),
        get(
            "/v1/runs",
            "list_runs",
            Op(
                "Recent runs (without their traces)",
                "runs",
                r.RunList,
                query=query_schema(RunsQuery),
                errors=(400,),
            ),
        ),
        post(
            "/v1/runs/{run_id}/rerun",
            "rerun_run",
            Op(
                "Run a run's agent on its input again, on the current snapshot (no session "
                "unless the body names one)",
                "runs",
                r.RunResult,
                bodies.RerunBody,
                stream="with `stream: true`: as POST /v1/agents/{name}/runs streams",
                errors=(400, 404, 409, 499, 500, 503),
                background=True,
                runs=True,
            ),
        ),
    ),
    _handlers,
)
