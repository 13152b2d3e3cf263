"""`/metrics`: Prometheus exposition of fim's counters."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fim.server.area import Area, Op, get
from fim.server.http import error, run_scope

log = logging.getLogger("fim.server")


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
        return await _exposition(api)

    return {"metrics": metrics_endpoint}


async def _exposition(api: Any) -> Response:
    # deferred: loading prometheus_client costs tens of ms
    from fim.masking import known
    from fim.observe.metrics import METRICS

    body, content_type = METRICS.exposition()
    body += await _queue_jobs(api) + _served(api)
    # label values include names a model wrote (an unknown tool's): masked like every exit
    return Response(known().text(body.decode()), media_type=content_type)


def _served(api: Any) -> bytes:
    """`fim_snapshot_info` of the snapshot this process serves now, `fim_build_info`."""
    # deferred: loaded with the metrics
    from fim.observe.metrics import info_exposition
    from fim.observe.vcs import served_commit
    from fim.version import fim_version

    snapshot = api.holder.current
    return info_exposition(snapshot.version, served_commit(snapshot), fim_version())


async def _queue_jobs(api: Any) -> bytes:
    """`fim_queue_jobs{status}` when background runs go to the PostgreSQL job queue (one
    count query per scrape): runs piling up in `todo` with no `fim worker` to take them.
    Nothing on SQLite (runs execute in the server); nothing, and one log line, when the
    queue cannot be read (the scrape still answers the other metrics)."""
    # deferred: the queue (procrastinate, psycopg) is loaded only on PostgreSQL
    from fim.server.background import queue_of

    queue = queue_of(api)
    if queue is None:
        return b""
    # deferred: loaded with the queue
    from fim.observe.metrics import queue_exposition
    from fim.workflows.worker_watch import queue_depth

    try:
        counts = await queue_depth(await queue.app())
    except Exception as exc:
        log.warning("/metrics: cannot count the job queue's runs: %s", exc)
        return b""
    return queue_exposition(counts)


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
            extra_query=True,  # a Prometheus job's `params:` are sent as the query string
        ),
    ),
    _handlers,
)
