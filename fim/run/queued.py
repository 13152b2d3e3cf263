"""Background agent runs (`POST /v1/agents/{name}/runs` with `"background": true`).

The request is answered at once (202, the run id); the run itself executes later, on a
`fim worker` through procrastinate when the state store is PostgreSQL, or in the server's
own process with SQLite. Either way it goes through `execute_agent_run`, which keeps the
run record current in the state store — `queued` when accepted, `running` with the
snapshot version when it starts, then the final status with the answer and every event —
so `GET /v1/runs/{id}` on any replica shows it. Its events also go to the run's event log
as they happen, so `GET /v1/runs/{id}/events` follows it live, as it follows a foreground
run (the record keeps its own copy: a retried job starts the run again, and the record
holds the attempt that finished).

A worker killed mid-run has its job retried by procrastinate, and the agent run starts
again from the request: agent runs, like tool calls, are at-least-once (docs/scale-out.md).
The log keeps the stopped attempt's events (a reader may have seen them; sequence numbers
never go back) and then says so: a `run_restarted` event with the new attempt's number,
after which the run's events begin again at `run_started`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fim.errors import FimError
from fim.events import ErrorEvent, RunFinished, RunRestarted
from fim.masking import known
from fim.observe.vcs import served_commit
from fim.run.agent import run_agent
from fim.run.sessions import session_key
from fim.run_summary import run_summary
from fim.store import get_store
from fim.store.live import EventLog
from fim.store.sessions import Sessions
from fim.types import Message

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.run.services import Services

log = logging.getLogger("fim.run")

KIND = "agent"
FINAL = frozenset({"ok", "max_iterations", "cancelled", "error", "failed"})
"""Statuses after which a redelivered job has nothing left to do."""


def request_data(
    messages: list[Message], session: str | None, owner: str, snapshot: Snapshot
) -> dict[str, Any]:
    """The job arguments of one background agent run: JSON only (procrastinate stores
    them in its jobs table), no secrets beyond what the caller sent."""
    return {
        "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in messages],
        "session_id": session,
        "owner": owner,
        "snapshot": snapshot.version,
    }


async def mark_queued(
    services: Services, run_id: str, kind: str, name: str, data: dict[str, Any]
) -> None:
    """The record a client polls from the moment the run is accepted."""

    await get_store(services).put_run(run_id, kind, name, "queued", {"background": True, **data})


async def execute_agent_run(
    snapshot: Snapshot,
    services: Services,
    run_id: str,
    agent: str,
    request: dict[str, Any],
    *,
    executor: str = "server",
    shutting_down: Callable[[], bool] = lambda: False,
) -> str:
    """Run one background agent run to its end and record it; returns its status.

    A run already recorded as finished (a job delivered again after its worker stopped
    between the last write and acknowledging the job) is left as it is. Cancelled
    (`POST /v1/runs/{id}/cancel`), it records itself `cancelled`, unless `shutting_down()`
    says its worker is stopping: then the record stays `running` for the job's next
    delivery to start it again.
    """

    store = get_store(services)
    existing = await store.get_run(run_id)
    if existing is not None and existing.status in FINAL:
        return existing.status
    history = [Message.model_validate(m) for m in request.get("messages") or []]
    session, owner = request.get("session_id"), str(request.get("owner") or "")
    key = session_key(owner, session)  # its session budgets count it too
    attempt = 1
    if existing is not None and existing.status == "running":  # an attempt that stopped
        attempt = int(existing.data.get("attempt") or 1) + 1
    base = {"background": True, "snapshot": snapshot.version, "executor": executor}
    if commit := served_commit(snapshot):  # the git commit it ran on (newcomer-52 #8)
        base["commit"] = commit
    base["attempt"] = attempt
    await store.put_run(run_id, KIND, agent, "running", {**base, "output": None, "events": []})
    trace: list[dict[str, Any]] = []
    final: RunFinished | None = None
    live = EventLog(store, run_id, KIND, agent, record=False)  # any replica tails it
    if attempt > 1:
        restarted = RunRestarted(run_id=run_id, attempt=attempt).model_dump(mode="json")
        trace.append(restarted)
        live.add(restarted)
    cancelled = False
    try:
        async for event in run_agent(
            snapshot, agent, history, services=services, run_id=run_id, owner=owner, session=key
        ):
            dumped = event.model_dump(mode="json")
            live.add(dumped)
            if event.type != "token":
                trace.append(dumped)
            if isinstance(event, RunFinished):
                final = event
    except asyncio.CancelledError:  # `POST /v1/runs/{id}/cancel`: recorded, then passed on
        if shutting_down():  # not a cancel: the job is delivered again
            raise
        cancelled = True
        final = RunFinished(run_id=run_id, output="", status="cancelled")
        for ended in (
            ErrorEvent(
                run_id=run_id,
                message="the run was stopped before its end (cancelled, or its server stopped)",
                kind="cancelled",
            ),
            final,
        ):
            trace.append(ended.model_dump(mode="json"))
            live.add(trace[-1])
    except FimError as exc:  # refused (an unavailable connector) or failed on purpose:
        # its reason on the run, one WARNING line, no traceback (newcomer-52 #5)
        began = any(e.get("type") == "run_started" for e in trace)
        said = known().text(str(exc))
        stopped = ErrorEvent(run_id=run_id, message=said, kind="run_error" if began else "refused")
        trace.append(stopped.model_dump(mode="json"))
        live.add(trace[-1])
        log.warning("background run %s of agent '%s' failed: %s", run_id, agent, said)
    except Exception as exc:  # a run that crashes is a failed run, recorded as such
        log.exception("background run %s of agent '%s' failed", run_id, agent)
        crash = {"type": "error", "run_id": run_id, "message": str(exc), "kind": "crash"}
        trace.append(crash)
        live.add(crash)
    finally:
        await live.close()
    status = final.status if final else "error"
    data = {**base, "output": final.output if final else None, "events": trace}
    data |= run_summary(trace)  # tool errors, hook blocks, input (newcomer-53 #7)
    if final is not None:
        data["usage"] = final.usage.model_dump()
    await store.put_run(run_id, KIND, agent, status, data)
    if final is not None and key and status == "ok":
        turn = [*history, Message(role="assistant", content=final.output)]
        await Sessions(store).save(key, owner, turn, name=session)
    if cancelled:
        raise asyncio.CancelledError
    return status
