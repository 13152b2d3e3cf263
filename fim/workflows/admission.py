"""Whether a queued job may run, and how one that may not ends: the key that queued it must
still be in fim.yaml (`revoked`: revoking a leaked key ends the runs it queued) and the
worker's snapshot must not be older than the one that accepted it (`fim.workflows.skew`);
a run that may not is recorded with the reason before any model call, node or tool, and
what it waited on is denied. `fim.workflows.durable` runs the jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.mcp.manager import SERVICE_KEY as MCP_SERVICE
from fim.run.queued import FINAL, execute_agent_run
from fim.run.services import Services
from fim.store import get_store
from fim.store.owners import REVOKED, still_configured
from fim.workflows.recovery import hand_back
from fim.workflows.skew import check

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import ServerSettings
    from fim.store import Store

log = logging.getLogger("fim.worker")


async def request_gone(services: Services, run_id: str, agent: str) -> str:
    """A job whose request is gone: finished already (delivered again), or pruned."""
    store = get_store(services)
    record = await store.get_run(run_id)
    if record is not None and record.status in FINAL:
        return record.status
    data = {**(record.data if record is not None else {}), "status": "failed"}
    data["error"] = "the request of this queued run is gone (pruned, or the run ended)"
    await store.put_run(run_id, "agent", agent, "failed", data)
    return "failed"


async def deny_waiting(store: Store, run_id: str) -> None:
    """Deny the approvals run `run_id` still waits on (it was cancelled: no one decides)."""
    for approval in await store.list_approvals("pending"):
        if approval.run_id == run_id:
            await store.resolve_approval(approval.id, False, by="cancel")


async def revoked(store: Store, settings: ServerSettings, run_id: str, owner: str) -> str | None:
    """None when run `run_id`, claimed for `owner`, may run under the current `settings`.
    Otherwise its key was removed from fim.yaml since it was queued (or paused): the run
    is recorded `cancelled` with the reason, before any model call or tool, and what it
    waited on is denied; returns its status."""
    if still_configured(settings, owner):
        return None
    record = await store.get_run(run_id)
    if record is None:
        return "cancelled"
    if record.status in FINAL:
        return record.status
    log.warning("run %s (%s '%s') not run: %s", run_id, record.kind, record.name, REVOKED)
    await store.record_cancelled(record, REVOKED)
    await deny_waiting(store, run_id)
    return "cancelled"


async def run_queued_agent(
    snapshot: Snapshot,
    services: Services,
    run_id: str,
    agent: str,
    request: dict[str, Any],
    *,
    executor: str = "worker",
    settings: Callable[[], ServerSettings] | None = None,
    shutting_down: Callable[[], bool] = lambda: False,
    resolve: Callable[[dict[str, Any] | None], Awaitable[Snapshot]] | None = None,
) -> str:
    """A queued background agent run (`execute_agent_run`), unless the key that queued it
    was revoked meanwhile (`revoked`, checked against `settings()`, the `server:` of
    fim.yaml as it is when the run starts; by default the snapshot's, a worker's current
    one), and never on a snapshot older than the one that accepted it (`request`'s
    `snapshot`, `fim.workflows.skew`: `resolve` may reload; without it only that very
    version runs). A skewed run ends `failed` with the reason, before any model call."""
    owner = str(request.get("owner") or "")
    keys = settings() if settings is not None else snapshot.project.server
    gone = await revoked(get_store(services), keys, run_id, owner)
    if gone is not None:
        return gone
    try:
        ready = await check(snapshot, request, resolve)
    except RunError as exc:
        store = get_store(services)
        record = await store.get_run(run_id)
        if record is not None and record.status in FINAL:
            return record.status
        log.warning("agent run %s (%s) not run: %s", run_id, agent, exc.message)
        data = {**(record.data if record is not None else {}), "status": "failed"}
        data.update(error=exc.message, hint=exc.hint)
        await store.put_run(run_id, "agent", agent, "failed", data)
        return "failed"
    if ready is not snapshot:  # reloaded: the key may have been revoked since
        gone = await revoked(get_store(services), ready.project.server, run_id, owner)
        if gone is not None:
            return gone
        snapshot = ready
    return await execute_agent_run(
        snapshot, services, run_id, agent, request, executor=executor,
        shutting_down=shutting_down,
    )  # fmt: skip


async def skewed(
    snapshot: Snapshot,
    state_url: str,
    providers: tuple[str, ...],
    run_id: str,
    kind: str,
    name: str,
    exc: RunError,
) -> str:
    """Record that workflow run `run_id` was not run for snapshot skew: `failed`, with the
    reason, keeping what its record holds (nodes done before, the paused node)."""
    log.warning("%s run %s (%s) not run: %s", kind, run_id, name, exc.message)
    services = Services(root=snapshot.root, state_url=state_url, providers=providers)
    try:
        store = get_store(services)
        record = await store.get_run(run_id)
        if record is not None and record.status in FINAL:
            return record.status
        data: dict[str, Any] = {"run_id": run_id, "workflow": name, "queued": True}
        if record is not None:
            data = {**data, **record.data}
        data.update(status="failed", error=exc.message, hint=exc.hint)
        await store.put_run(run_id, kind, name, "failed", data)
        await deny_waiting(store, run_id)
        return "failed"
    finally:
        await services.aclose()


def job_services(
    snapshot: Snapshot, state_url: str, providers: tuple[str, ...], mcp: Any = None
) -> Services:
    """A job's services; with `mcp`, the worker's MCP manager in them (not closed with
    the job's)."""
    services = Services(root=snapshot.root, state_url=state_url, providers=providers)
    if mcp is not None:
        services.cache[MCP_SERVICE] = mcp
    return services


async def hand_back_job(snapshot: Snapshot, state_url: str, run_id: str) -> None:
    """`fim.workflows.recovery.hand_back` for a job whose worker stops under it, on
    services of its own (the job's may be half closed by the cancellation)."""
    services = job_services(snapshot, state_url, ())
    try:
        await hand_back(services, run_id)
    finally:
        await services.aclose()
