"""`/metrics`: Prometheus exposition of fim's counters."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fim.server.area import Area, Op, get
from fim.server.http import error, run_scope


def _handlers(api: Any) -> dict[str, Any]:
    async def metrics_endpoint(request: Request) -> Response:
        """Prometheus exposition of fim's counters (runs, latency, tokens, cost, tools,
        hooks, reloads, active runs). They count every key's runs together, so on a server
        with keys they are an operator's (a tenant's usage is `GET /v1/usage`)."""
        if run_scope(request) is not None:
            return error(
                403,
                "the metrics count every key's runs: reading them needs an operator key",
                "give the scraper a key of server.operator_keys; a key's own usage is "
                "GET /v1/usage",
            )
        return _exposition()

    return {"metrics": metrics_endpoint}


def _exposition() -> Response:
    # deferred: loading prometheus_client costs tens of ms
    from fim.masking import known
    from fim.observe.metrics import METRICS

    body, content_type = METRICS.exposition()
    # label values include names a model wrote (an unknown tool's): masked like every exit
    return Response(known().text(body.decode()), media_type=content_type)


AREA = Area(
    "metrics",
    (
        get(
            "/metrics",
            "metrics",
            Op(
                "Prometheus metrics (text exposition format): runs, latencies, tokens, tool "
                "calls, hook blocks, reloads, active runs (an operator key's, on a server "
                "with keys)",
                "status",
                errors=(403, 501),
            ),
        ),
    ),
    _handlers,
)
