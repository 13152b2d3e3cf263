"""Workflows: list them and start a run."""

from __future__ import annotations

from fim.server import bodies
from fim.server import responses as r
from fim.server.area import Area, Op, get, post
from fim.server.routes import workflow_handlers

AREA = Area(
    "workflows",
    (
        get(
            "/v1/workflows",
            "list_workflows",
            Op("The workflows and their inputs", "workflows", r.WorkflowList),
        ),
        post(
            "/v1/workflows/{name}/runs",
            "run_workflow",
            Op(
                "Run a workflow (it may pause at a human node; see approvals)",
                "workflows",
                r.WorkflowRunResult,
                bodies.WorkflowRunBody,
                stream="with `stream: true`: `node_started`, `node_finished`, `node_skipped`, "
                "`node_failed`, `notice` and a last `workflow_finished`",
                errors=(400, 404, 503),
                background=True,
                runs=True,
            ),
        ),
    ),
    workflow_handlers,
)
