"""Who started a run over HTTP, so that only they can read it back and decide for it.

A server with `server.api_keys` gives each key its own sessions (`fim.store.sessions`);
the runs a key starts carry that key's conversation too (the input, the answer, every tool
call), so `GET /v1/runs`, `GET /v1/runs/{id}`, its event stream and the approvals its tool
calls wait on are shown only to the key that started it (and to `server.operator_keys`).
The owner is the same hash the sessions use: of the key, or of its tenant's name when the
key is declared `{key: ..., tenant: ...}` (a tenant's keys share what they own, so a key
can be rotated); never the key itself.

`fim.run.agent.run_agent` claims each run for the owner the server passes it, and passes
it on (a context variable) to the runs it delegates to, claimed for the same key; a
workflow's agent nodes take the workflow run's owner. The approvals all of them ask for are
then that key's too. A run with no owner row (started by `fim run`, `fim eval` or a
worker's own schedule) is shown to no keyed caller: the check fails closed (`fim approvals`
and operator keys still see it). A server without keys records nothing and checks nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar

from fim.processes import alive, this_process
from fim.store.schema import table

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.config.schema import ServerSettings
    from fim.store import Store

T = TypeVar("T")

REVOKED = "its API key was removed from server.api_keys before it ran"
"""Why a queued run of a key that is no longer configured ends `cancelled`."""


def key_owner(token: bytes, tenant: str = "") -> str:
    """The owner hash of a key, or of the tenant it belongs to (whose keys share what they
    own). Here, below the server, because a worker checks a queued run's owner too."""
    if tenant:
        return hashlib.sha256(b"fim-tenant\0" + tenant.encode()).hexdigest()
    return hashlib.sha256(b"fim-session-owner\0" + token).hexdigest()


def still_configured(settings: ServerSettings, owner: str) -> bool:
    """Whether a run claimed for `owner` may still run under `settings`: its key (or a key
    of its tenant, or its operator key) is still in fim.yaml. A run queued before the key
    was revoked must not spend for it later. "" (a run of a server without keys, `fim
    run`) is nobody's key and always may."""
    if not owner:
        return True
    owners = {key_owner(k.encode()) for k in settings.operator_keys if k}
    for key in settings.api_keys:
        if isinstance(key, str):
            if key:
                owners.add(key_owner(key.encode()))
        elif key.key:
            owners.add(key_owner(key.key.encode(), key.tenant))
    return owner in owners


async def claim(store: Store, run_id: str, owner: str) -> None:
    """Record `owner` as who started `run_id`, before anyone can ask for it; a run
    already claimed keeps its owner."""
    await store._tx(lambda conn: _claim(conn, run_id, owner))


def _claim(conn: Connection, run_id: str, owner: str) -> None:
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    insert: Any = dialect.insert(table("run_owners")).values(run_id=run_id, owner=owner)
    conn.execute(insert.on_conflict_do_nothing(index_elements=["run_id"]))


async def claimed(
    store: Store, run_id: str, owner: str, events: AsyncIterator[T]
) -> AsyncIterator[T]:
    """`events` unchanged, `run_id` claimed for `owner` ("": nobody) before the first one
    (a run refused before its first event, bad inputs, leaves no owner row)."""
    pending = bool(owner)
    async for event in events:
        if pending:
            await claim(store, run_id, owner)
            pending = False
        yield event


async def owner_of(store: Store, run_id: str) -> str | None:
    """The owner recorded for `run_id`; None when it has none."""
    rows = table("run_owners")
    query = rows.select().where(rows.c.run_id == run_id)
    row = await store._read(lambda conn: conn.execute(query).mappings().first())
    return None if row is None else str(row["owner"])


async def may_read(store: Store, run_id: str, owner: str | None) -> bool:
    """Whether a caller may see run `run_id` (and decide what it waits on): `owner` is the
    hash of its key, or None when it sees every run (no keys, an operator key)."""
    return owner is None or await owner_of(store, run_id) == owner


def owned_by(owner: str) -> Any:
    """The ids of the runs `owner` started, as a subquery (`... .in_(owned_by(owner))`)."""
    rows = table("run_owners")
    return rows.select().with_only_columns(rows.c.run_id).where(rows.c.owner == owner)


PARKING = ("queued", "running", "paused")
"""The statuses of a workflow run that is paused at a human node or may still pause there:
what the per-key cap of paused runs counts (`paused_runs`)."""

STALE_AFTER = 3600.0
"""Seconds after its last write when a `queued` or `running` run whose driver cannot be
checked from here (another host or container, or none recorded) stops counting toward
its key's cap: a replica that died must not hold its key's places for good."""


async def park(store: Store, run_id: str, owner: str, workflow: str) -> None:
    """Take a place for workflow run `run_id` of `owner` among its runs that may pause,
    before it is counted (`paused_runs`): its owner row and a `queued` record, so a start
    of the same key racing it (another request, another replica) counts it too. The run's
    engine, or a background start, writes over the record; `unpark` takes both back for a
    run that never started. The record names this process as its driver (`owner`, as a
    run's state does): a place left by a process that died counts no more."""
    state: dict[str, Any] = {"run_id": run_id, "workflow": workflow, "decl": {}, "nodes": {}}
    state.update(inputs={}, status="queued", queued=False, owner=this_process())
    await claim(store, run_id, owner)
    await store.put_run(run_id, "workflow", workflow, "queued", state)


async def unpark(store: Store, run_id: str, *, keep_owner: bool = False) -> None:
    """Give back the place `park` took when run `run_id` is still only `queued`: it was
    refused, its start failed or its client left before it began, and must not count
    against its key. With `keep_owner` (its engine began, and may yet write its record)
    the owner row stays, so whatever the engine writes is still its key's."""
    runs = table("runs")
    waiting = runs.delete().where(
        runs.c.id == run_id, runs.c.kind == "workflow", runs.c.status == "queued"
    )
    rows = table("run_owners")
    unclaim = rows.delete().where(rows.c.run_id == run_id)

    def work(conn: Connection) -> None:
        if conn.execute(waiting).rowcount and not keep_owner:
            conn.execute(unclaim)

    await store._tx(work)


async def paused_runs(store: Store, owner: str, now: float | None = None) -> int:
    """How many workflow runs `owner` started are paused at a human node or may still
    pause there (`PARKING`, and the places `park` took): the per-key cap of
    `fim.server.limits.check_parked`. Counting only the paused ones let a burst of starts
    all pass before any of them paused.

    Paused runs always count. A queued or running one counts only while something may
    still drive it (`driven`): what a stopped or crashed server left behind must not lock
    its key out. `now`: the time to judge staleness at (tests pass their own)."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func, select, text

    runs = table("runs")
    mine = (runs.c.kind == "workflow", runs.c.id.in_(owned_by(owner)))
    paused = select(func.count()).where(runs.c.status == "paused", *mine)
    # the two fields `driven` reads, not the whole state (inputs, node outputs: attack-31
    # #2, each refused start of a key at its cap parsed all of its runs)
    going = select(
        runs.c.id,
        runs.c.data["queued"].label("queued"),
        runs.c.data["owner"].label("owner"),
        runs.c.updated_at,
    ).where(runs.c.status.in_(("queued", "running")), *mine)

    def read(conn: Connection) -> tuple[int, list[Any], set[str]]:
        rows = [
            {**row, "data": {"queued": _value(row["queued"]), "owner": _value(row["owner"])}}
            for row in conn.execute(going).mappings()
        ]
        jobs: set[str] = set()
        queued = [str(r["id"]) for r in rows if r["data"].get("queued")]
        if queued and conn.dialect.name == "postgresql":
            present = "SELECT to_regclass('procrastinate_jobs') IS NOT NULL"
            if conn.execute(text(present)).scalar():
                pending = text(
                    "SELECT queueing_lock FROM procrastinate_jobs WHERE status IN "
                    "('todo', 'doing') AND queueing_lock = ANY(:ids)"
                )
                jobs = {str(row[0]) for row in conn.execute(pending, {"ids": queued})}
        return int(conn.execute(paused).scalar() or 0), rows, jobs

    counted, rows, jobs = await store._read(read)
    at = time.time() if now is None else now
    return counted + sum(1 for r in rows if driven(r, r["id"] in jobs, at))


def _value(value: Any) -> Any:
    """One field of a record's `data` as the driver returned it, decoded if it came as
    JSON text."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def driven(row: Any, job_pending: bool, now: float) -> bool:
    """Whether a `queued` or `running` workflow run (`row`: its `data` and `updated_at`)
    may still be driven, so holds its key's place: its `fim worker` job waits or runs
    (`job_pending`), or the process recorded as driving it (`owner`, written by `park`
    and the engine) is alive; when that cannot be told from here (another host, nothing
    recorded), while it was written less than `STALE_AFTER` ago."""
    data = row["data"]
    if job_pending:
        return True
    if not data.get("queued"):
        living = alive(data.get("owner"))
        if living is not None:
            return living
    return now - float(row["updated_at"]) < STALE_AFTER
