"""Budget holds shared by every process of one PostgreSQL store: the room model calls in
flight reserve under a daily, session or key limit, recorded in the database.

A process's own calls in flight hold room in its in-process pools (`fim.run.in_flight`),
which no other process sees: replicas (`fim serve`, its `--workers`, `fim worker`) on one
PostgreSQL store each found the day's budget free while the others' calls were in flight,
and together spent it several times over. So, on PostgreSQL only, a call under such a
limit also takes a hold here before it is made (`take`): in one transaction, with the
limit's scope locked (`pg_advisory_xact_lock`, scopes in one order, so two calls of
different scopes never deadlock), it reads what the usage table recorded for the scope
plus every live hold, decides (the caller's arithmetic, `fim.run.limits.Limit.room`) and
inserts its own. The hold becomes the call's real count when it answers (`answered`,
`final`) and is deleted once the run's usage row is written (`release`); a hold whose
process died lapses on its own at `expires_at` (the call's timeout and a margin for one in
flight, a day for a real count never written), by the database's clock, so replicas whose
clocks differ agree.

The admission runs on a pooled connection on a worker thread, as PostgreSQL reads do
(`Database._read`): its locks are its own, never mixed into the writer's group commit
(where another unit's lock order, and the whole batch's duration, would hold them). The
answer and the release are plain writes through the writer (`Database._tx`). SQLite is one
process, served by the pools alone: nothing here runs for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from fim.store.schema import storable
from fim.tasks import spawn

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.store import Store

T = TypeVar("T")

log = logging.getLogger("fim.store.holds")

TABLE = "fim_budget_holds"
"""Made by the store's migration 10 (`fim.store.schema`), on PostgreSQL only."""

MARGIN = 60.0
"""Seconds a call's hold outlives its model's `timeout`: past it the call was abandoned
(and counted) or its process died."""

KEEP_ANSWERED = 86_400.0
"""Seconds a call's real count is kept when its run's usage row is never written (its
process died mid-run): it was spent, so the day counts it."""

KEEP_LATE = 300.0
"""Seconds the count of a call answering after its run's row was written is kept: its
`late` row (written right after) counts it then."""


@dataclass(frozen=True)
class Sums:
    """One scope as the database has it: what the usage table recorded, the real counts of
    calls answered in runs not recorded yet (`final`), and the room calls in flight hold."""

    recorded_tokens: int
    recorded_cost: float | None
    final_tokens: int
    final_cost: float
    held_tokens: int
    held_cost: float
    calls: int
    """Calls in flight holding room in the scope, every process's."""


def scope_key(scope: Sequence[Any]) -> tuple[str, int]:
    """The scope's row key (hex) and advisory lock key (a signed 64-bit integer):
    ("day", day, agent, owner) or ("session", session, agent), None for every agent or
    every key. The lock keys of the migrations (one small integer) are not of this form."""
    digest = hashlib.sha256(json.dumps(list(scope)).encode()).digest()
    return digest[:16].hex(), int.from_bytes(digest[:8], "big", signed=True)


# --------------------------------------------------------------------------- statements

_NOW = "extract(epoch from now())"

_SUMS = """
WITH gone AS (
    DELETE FROM fim_budget_holds WHERE scope = %(scope)s AND expires_at < {now}
)
SELECT u.tokens, u.cost, h.final_tokens, h.final_cost, h.held_tokens, h.held_cost, h.calls
FROM (
    SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) AS tokens, sum(cost) AS cost
    FROM {usage} WHERE {where}
) AS u, (
    SELECT coalesce(sum(tokens) FILTER (WHERE final AND NOT recorded), 0) AS final_tokens,
           coalesce(sum(cost) FILTER (WHERE final AND NOT recorded), 0) AS final_cost,
           coalesce(sum(tokens) FILTER (WHERE NOT final), 0) AS held_tokens,
           coalesce(sum(cost) FILTER (WHERE NOT final), 0) AS held_cost,
           count(*) FILTER (WHERE NOT final) AS calls
    FROM (
        SELECT tokens, cost, final,
               run_id IS NOT NULL AND run_id IN (SELECT run_id FROM {usage} WHERE {where})
               AS recorded
        FROM fim_budget_holds WHERE scope = %(scope)s AND expires_at >= {now}
    ) AS live
) AS h
"""
"""One scope's sums in one statement, so the usage rows and the holds are read in one
snapshot: an answered call's real count counts until its run's usage row is there, then
the row does (a snapshot sees one or the other, never neither, and never both: the next
run of a session was refused for the run before it, counted twice while its holds were
being deleted). A late answer's count (no run id: its run's row was written before it)
counts until its hold goes. The scope's expired holds are deleted on the way (the scope
is locked: no two deleters)."""

_SQL: dict[tuple[str, bool, bool], str] = {}


def _sums_sql(kind: str, agent: bool, owner: bool) -> str:
    """The sums statement of a scope of `kind` (`day`, `session`), filtered by agent and
    by the key's runs (`fim.store.usage.spent` and `session_spent` count the same rows)."""
    found = _SQL.get((kind, agent, owner))
    if found is None:
        usage = "fim_usage" if kind == "day" else "fim_session_usage"
        where = ["day = %(value)s" if kind == "day" else "session = %(value)s"]
        if agent:
            where.append("agent = %(agent)s")
        if owner:
            where.append("run_id IN (SELECT run_id FROM fim_run_owners WHERE owner = %(owner)s)")
        found = _SQL[(kind, agent, owner)] = _SUMS.format(
            now=_NOW, usage=usage, where=" AND ".join(where)
        )
    return found


_INSERT = (
    "INSERT INTO fim_budget_holds (scope, call, tokens, cost, final, expires_at, run_id) "
    f"SELECT scope, %(call)s, %(tokens)s, %(cost)s, false, {_NOW} + %(ttl)s, %(run)s "
    "FROM unnest(%(scopes)s::varchar[]) AS scope"
)
_ANSWER = (
    "UPDATE fim_budget_holds SET tokens = %(tokens)s, cost = %(cost)s, final = true, "
    f"expires_at = {_NOW} + %(keep)s, run_id = CASE WHEN %(late)s THEN NULL ELSE run_id END "
    "WHERE call = %(call)s"
)
_DELETE = "DELETE FROM fim_budget_holds WHERE call = ANY(%(calls)s)"


def _cursor(conn: Connection) -> Any:
    """The psycopg cursor of `conn`, inside its transaction: these few statements run
    on every budgeted call, and SQLAlchemy's execution machinery costs more Python than
    the database spends on them (as `fim.store.prepared` does for the hot writes)."""
    return conn.connection.driver_connection.cursor()  # type: ignore[union-attr]


# --------------------------------------------------------------------------- API


async def take(
    store: Store,
    call: str,
    scopes: Sequence[Sequence[Any]],
    decide: Callable[[list[Sums]], tuple[T, tuple[int, float] | None]],
    ttl: float,
    run_id: str | None = None,
) -> T:
    """Lock `scopes`, read their `Sums` and let `decide` (pure arithmetic, run on the
    worker thread inside the transaction) answer and say what to hold: (tokens, cost)
    is inserted in every scope for `call`, expiring `ttl` seconds from now; None holds
    nothing (refused, or no room: the caller waits and asks again). Returns `decide`'s
    answer. A caller cancelled meanwhile leaves no hold behind (`release`)."""
    keys = [scope_key(scope) for scope in scopes]
    # each scope once, locked in one order in every process
    keyed = sorted(dict(zip(keys, scopes, strict=True)).items(), key=lambda item: item[0][1])

    def work() -> tuple[T, bool]:
        with store._connect().begin() as conn, _cursor(conn) as cursor:
            for (_, lock), _scope in keyed:
                cursor.execute("SELECT pg_advisory_xact_lock(%(k)s)", {"k": lock})
            sums: dict[str, Sums] = {}
            for (key, _), scope in keyed:
                kind, value, agent = scope[0], scope[1], scope[2]
                owner = scope[3] if kind == "day" else None
                # the usage rows' text as it was written (a session `s\x00`: `s\ufffd`)
                value, agent = (None if v is None else storable(v) for v in (value, agent))
                params = {"scope": key, "value": value, "agent": agent, "owner": owner}
                row = cursor.execute(
                    _sums_sql(kind, agent is not None, owner is not None), params
                ).fetchone()
                sums[key] = Sums(
                    int(row[0]),
                    None if row[1] is None else float(row[1]),
                    int(row[2]),
                    float(row[3]),
                    int(row[4]),
                    float(row[5]),
                    int(row[6]),
                )
            answer, hold = decide([sums[key] for key, _ in keys])
            if hold is not None:
                tokens, cost = hold
                cursor.execute(
                    _INSERT,
                    {
                        "call": call,
                        "tokens": tokens,
                        "cost": cost,
                        "ttl": ttl,
                        "run": run_id,
                        "scopes": [key for (key, _), _ in keyed],
                    },
                )
            return answer, hold is not None

    pending = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        answer, _ = await asyncio.shield(pending)
    except asyncio.CancelledError:
        # the transaction goes on in its thread: a hold it commits is dropped then
        pending.add_done_callback(lambda done: _drop_if_held(store, call, done))
        raise
    return answer


def _drop_if_held(store: Store, call: str, done: asyncio.Future[tuple[Any, bool]]) -> None:
    if not done.cancelled() and done.exception() is None and done.result()[1]:
        release(store, [call])


def answered(
    store: Store, call: str, tokens: int, cost: float, keep: float, late: bool = False
) -> None:
    """`call` answered, spending `tokens` and `cost`: its holds become that real count,
    kept `keep` seconds unless `release` deletes them first (counted until its run's
    usage row is there, or, `late`, after its run's row was written, until it goes).
    Written in the background (the call may be being cancelled); a failure is logged and
    the hold lapses at its expiry (counting the room it held until then: fails closed)."""
    params = {"call": call, "tokens": tokens, "cost": cost, "keep": keep, "late": late}
    _background(store, _ANSWER, params, "a budget hold")


def release(store: Store, calls: list[str]) -> None:
    """The usage rows counting `calls` are written: their holds go (in the background)."""
    _background(store, _DELETE, {"calls": calls}, "budget holds")


def _background(store: Store, sql: str, params: dict[str, Any], what: str) -> None:
    """`sql` through the store's writer, in a task; outside an event loop (a run
    finalized by the garbage collector) on a thread of its own."""

    def work(conn: Connection) -> None:
        with _cursor(conn) as cursor:
            cursor.execute(sql, params)

    async def write() -> None:
        try:
            await store._tx(work)
        except Exception:
            log.exception("could not update %s", what)

    try:
        asyncio.get_running_loop()  # outside a loop: written on a thread below
    except RuntimeError:

        def alone() -> None:
            try:
                with store._connect().begin() as conn:
                    work(conn)
            except Exception:
                log.exception("could not update %s", what)

        threading.Thread(target=alone, name="fim-holds", daemon=True).start()
        return
    spawn(write())
