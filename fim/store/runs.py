"""Run records in the state store: one row per agent or workflow run, upserted as it goes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fim.masking import known
from fim.store.engine import Database
from fim.store.owners import owned_by
from fim.store.records import RunRecord
from fim.store.schema import table

if TYPE_CHECKING:
    from sqlalchemy import Connection

_RUN_KEYS = ["id", "created_at", "updated_at", "kind", "name", "status", "data"]


class Runs(Database):
    async def record_cancelled(self, record: RunRecord, reason: str, **data: Any) -> None:
        """Write `record` (a run record as `get_run` returns it) ended `cancelled` with
        `reason` as its error, `data` over its state: the one way a run is ended from
        outside its engine (a revoked key, a job dropped, an expired approval, the server
        stopping)."""
        state = {**record.data, "status": "cancelled", "error": reason, **data}
        await self.put_run(record.id, record.kind, record.name, "cancelled", state)

    async def put_run(
        self, run_id: str, kind: str, name: str, status: str, data: dict[str, Any]
    ) -> None:
        """Insert or update a run; `created_at` is kept from the first write. Like every
        write here, the data is masked (`fim.masking.known`): the state database is an
        exit like any other (backups, replicas, `fim approvals list`). Raises
        `fim.store.writer.WriteBehindError` (after writing the record) when the run's
        usage or events, written behind, could not be stored."""
        mask = known()
        name, data = mask.text(name), mask.value(data)

        def work(conn: Connection) -> None:
            now = time.time()
            row = {"id": run_id, "created_at": now, "updated_at": now, "kind": kind}
            row |= {"name": name, "status": status, "data": data}
            dialect = conn.dialect.name
            upsert = self._statement(f"put_run:{dialect}", lambda: run_upsert(dialect), _RUN_KEYS)
            upsert.execute(conn, [row])

        await self._tx(work, key=run_id)

    async def claim_run(
        self, run_id: str, status: str, seen_at: float, data: dict[str, Any]
    ) -> bool:
        """Record `data` as the run's state, `running`, only if the run is still as this
        process read it (`status`, written at `seen_at`): False when another process wrote
        it since. Two `fim workflow resume` of one stopped or orphaned run both passed the
        checks on what they had read and both ran its cut-off nodes again (attack-39 F6);
        with this compare-and-set exactly one of them takes it over."""
        runs = table("runs")
        update = (
            runs.update()
            .where(runs.c.id == run_id)
            .where(runs.c.status == status)
            .where(runs.c.updated_at == seen_at)
            .values(status="running", data=known().value(data), updated_at=time.time())
        )
        return bool(await self._tx(lambda c: c.execute(update).rowcount, key=run_id))

    async def get_run(self, run_id: str) -> RunRecord | None:
        runs = table("runs")
        row = await self._read(
            lambda c: c.execute(runs.select().where(runs.c.id == run_id)).mappings().first()
        )
        return RunRecord(**row) if row else None

    async def list_runs(
        self,
        kind: str | None = None,
        limit: int = 50,
        owner: str | None = None,
        *,
        status: str | None = None,
        name: str | None = None,
        has_errors: bool | None = None,
        snapshot: str | None = None,
    ) -> list[RunRecord]:
        """Newest first, of `kind`, `status` and `name` (the agent's or workflow's) when
        given; with `owner`, only the runs that caller started (`fim.store.owners`); with
        `has_errors`, only the runs whose record counts (True) or does not count (False) a
        tool error or a hook block (`fim.run_summary`); with `snapshot`, only the runs
        whose record names a snapshot version or commit starting with it."""
        runs = table("runs")
        query = runs.select().order_by(runs.c.created_at.desc()).limit(limit)
        for column, value in (("kind", kind), ("status", status), ("name", name)):
            if value is not None:
                query = query.where(runs.c[column] == value)
        if has_errors is not None:
            query = query.where(_erred() if has_errors else ~_erred())
        if snapshot is not None:
            query = query.where(_on_snapshot(snapshot))
        if owner is not None:
            query = query.where(runs.c.id.in_(owned_by(owner)))
        rows = await self._read(lambda c: list(c.execute(query).mappings()))
        return [RunRecord(**row) for row in rows]


def _on_snapshot(prefix: str) -> Any:
    """The runs whose record's `snapshot` or `commit` (JSON fields of `data`: a served
    run's and a background run's, newcomer-52 #8) starts with `prefix`."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import or_

    data = table("runs").c.data
    named = [
        data[key].as_string().startswith(prefix, autoescape=True) for key in ("snapshot", "commit")
    ]
    return or_(*named)


def _erred() -> Any:
    """The runs whose record counts a tool error or a hook block (a JSON field of `data`,
    read alike by SQLite's JSON functions and PostgreSQL's operators)."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func

    data = table("runs").c.data
    counted = [func.coalesce(data[key].as_integer(), 0) for key in ("tool_errors", "hook_blocks")]
    return counted[0] + counted[1] > 0


def run_upsert(dialect_name: str) -> Any:
    """INSERT a run, or UPDATE it keeping `created_at`: one statement (both dialects have
    ON CONFLICT) instead of an UPDATE and, for every new run, an INSERT after it."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy.dialects import postgresql, sqlite

    runs = table("runs")
    statement: Any = (postgresql if dialect_name == "postgresql" else sqlite).insert(runs)
    kept = {c: statement.excluded[c] for c in ("kind", "name", "status", "data", "updated_at")}
    return statement.on_conflict_do_update(index_elements=[runs.c.id], set_=kept)
