"""The development page, its files and the OpenAPI document (hidden from the document), and
the API routes the page needs: the status stream, prompt reports, graphs and evals."""

from __future__ import annotations

from fim.server import bodies
from fim.server import responses as r
from fim.server.area import Area, Endpoint, Op, get, hidden, post
from fim.server.devpage import devpage_handlers

AREA = Area(
    "devpage",
    (
        hidden("/", "index"),
        hidden("/docs", "docs"),
        hidden("/favicon.ico", "favicon"),
        hidden("/openapi.json", "openapi"),
        Endpoint("/static", "static", mount="static"),
        get(
            "/v1/status/stream",
            "status_stream",
            Op(
                "The status as server-sent events, one `status` event per change",
                "status",
                stream="`event: status` with the body of GET /v1/status; the stream ends after "
                "a while and clients reconnect",
            ),
        ),
        get(
            "/v1/agents/{name}/prompt",
            "prompt",
            Op(
                "The prompt and tools as the model sees them, with token counts",
                "agents",
                r.PromptReport,
                errors=(400, 404, 503),
            ),
        ),
        get(
            "/v1/workflows/{name}/graph",
            "graph",
            Op("The DAG of `fim graph` as JSON", "workflows", r.WorkflowGraph, errors=(404,)),
        ),
        get("/v1/evals", "list_evals", Op("The eval suites", "evals", r.EvalSuiteList)),
        post(
            "/v1/evals/{suite}/runs",
            "run_eval",
            Op(
                "Run an eval suite (replay of recorded model answers by default)",
                "evals",
                r.EvalReport,
                bodies.EvalRunBody,
                errors=(400, 403, 404),
                runs=True,
            ),
        ),
    ),
    devpage_handlers,
)
