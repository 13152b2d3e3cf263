"""`/metrics`: Prometheus exposition of fim's counters."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fim.server.area import Area, Op, get


async def metrics_endpoint(request: Request) -> Response:
    """Prometheus exposition of fim's counters (runs, latency, tokens, cost, tools, hooks,
    reloads, active runs)."""
    # deferred: loading prometheus_client costs tens of ms
    from fim.masking import known
    from fim.observe.metrics import METRICS

    body, content_type = METRICS.exposition()
    # label values include names a model wrote (an unknown tool's): masked like every exit
    return Response(known().text(body.decode()), media_type=content_type)


def _handlers(api: Any) -> dict[str, Any]:
    return {"metrics": metrics_endpoint}


AREA = Area(
    "metrics",
    (
        get(
            "/metrics",
            "metrics",
            Op(
                "Prometheus metrics (text exposition format): runs, latencies, tokens, tool "
                "calls, hook blocks, reloads, active runs",
                "status",
            ),
        ),
    ),
    _handlers,
)
