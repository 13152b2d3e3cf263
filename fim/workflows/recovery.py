"""Persisted workflow runs: looking one up, listing those whose process is gone, and
deciding whether this process may take one over.

A run outlives the process that started it: `fim workflow show` and `resume` load it by
id, `fim serve` lists the orphaned ones at start, and the engine asks `check_takeover`
before it continues a run recorded as running, so two processes never drive the same
nodes. Kept apart from `fim.workflows.engine`, which starts and continues runs.
"""

from __future__ import annotations

from fim.errors import RunError
from fim.run.services import Services
from fim.workflows.state import KIND, RunState, orphaned, owner_alive, record_data


async def load_run(services: Services, run_id: str) -> RunState:
    """The persisted state of a workflow run, or a RunError naming what exists."""
    # deferred: loading fim.store costs a few ms
    from fim.store import get_store

    record = await get_store(services).get_run(run_id)
    if record is None or record.kind != KIND:
        raise RunError(
            f"no workflow run '{run_id}'", hint="`fim workflow runs` lists the recent runs"
        )
    state = RunState.from_dict(record_data(record))
    state.seen_at = record.updated_at
    return state


async def claim(services: Services, state: RunState, was: str) -> None:
    """Record `state` (adopted by this process: `running`, its owner this process) in
    place of the run recorded `was`, or raise RunError when another process took it over
    since this one read it (`Runs.claim_run`)."""
    # deferred: loading fim.store costs a few ms
    from fim.store import get_store

    if not await get_store(services).claim_run(state.run_id, was, state.seen_at, state.to_dict()):
        raise RunError(
            f"run '{state.run_id}' was taken over by another process while this one resumed it",
            hint=f"`fim workflow show {state.run_id}` follows it",
        )


async def hand_back(services: Services, run_id: str) -> None:
    """A queued run whose worker stopped under it (past `--shutdown-timeout`, the job to be
    delivered again): recorded `running` again, its cut-off nodes with it, so the next
    delivery recovers it as after a crash (`_recover`) instead of finding it `cancelled`
    and ending (newcomer-8 A). A run cancelled for another reason is left as it is."""
    # deferred: loading fim.store costs a few ms
    from fim.store import get_store
    from fim.workflows.scheduler import STOPPED

    store = get_store(services)
    record = await store.get_run(run_id)
    if record is None or record.status != "cancelled" or record.data.get("error") != STOPPED:
        return
    nodes = {
        node: {**state, "status": "running"} if state.get("status") == "cancelled" else state
        for node, state in (record.data.get("nodes") or {}).items()
    }
    data = {**record.data, "status": "running", "error": None, "finished_at": None}
    await store.put_run(run_id, KIND, record.name, "running", {**data, "nodes": nodes})


async def orphaned_runs(services: Services, limit: int = 200) -> list[RunState]:
    """Recent workflow runs recorded as running whose process is gone (on this host):
    `fim workflow resume RUN_ID` finishes them."""
    # deferred: loading fim.store costs a few ms
    from fim.store import get_store

    records = await get_store(services).list_runs(kind=KIND, limit=limit)
    states = [RunState.from_dict(record_data(r)) for r in records if r.status == "running"]
    return [s for s in states if orphaned(s)]


def check_takeover(state: RunState, queued: bool, force: bool) -> None:
    """Raise RunError unless this process may continue `state`, a run recorded as running
    whose process should be gone. `queued`: this process is a `fim worker` job.

    A queued run (`fim worker`) is never recovered here by host/pid liveness: its
    worker's heartbeat is procrastinate's, which re-delivers the job to another worker
    (fim.workflows.durable.advance) — the only path that recovers it. `force` takes over a
    run recorded on another host, whose liveness cannot be checked.
    """
    if state.queued or queued:
        if not (state.queued and queued):
            raise RunError(
                f"run '{state.run_id}' is executed by `fim worker` jobs; procrastinate "
                "hands it to another worker when its worker stops",
                hint="keep a `fim worker` running; `fim workflow show` follows it",
            )
        alive: bool | None = False
    else:
        alive = owner_alive(state.owner)
    if alive:
        raise RunError(
            f"run '{state.run_id}' is still running (process {state.owner.get('pid')})",
            hint="wait for it to finish, or stop that process and resume again",
        )
    if alive is None and not force:
        host = state.owner.get("host") or "an unrecorded host"
        raise RunError(
            f"run '{state.run_id}' is recorded as running on {host}, where this process "
            "cannot check that it is still alive",
            hint="if that process is gone, resume with --force",
        )
