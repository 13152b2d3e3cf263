"""Approvals of tool calls and human workflow nodes."""

from __future__ import annotations

from fim.server import bodies
from fim.server import responses as r
from fim.server.area import Area, Op, get, post
from fim.server.queries import ApprovalsQuery, query_schema
from fim.server.routes import approval_handlers

AREA = Area(
    "approvals",
    (
        get(
            "/v1/approvals",
            "list_approvals",
            Op(
                "Approvals (pending by default)",
                "approvals",
                r.ApprovalList,
                query=query_schema(ApprovalsQuery),
                errors=(400,),
            ),
        ),
        post(
            "/v1/approvals/{approval_id}",
            "resolve",
            Op(
                "Approve or deny a pending tool call or human workflow node",
                "approvals",
                r.DecisionResult,
                bodies.DecisionBody,
                errors=(400, 404, 409),
            ),
        ),
    ),
    approval_handlers,
)
