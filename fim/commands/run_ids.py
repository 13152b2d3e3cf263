"""A run id as a person types it on the command line: the whole id, a unique prefix of it
(as git takes a commit's), or `last` (the newest run; with an agent's name, the newest run
of that agent). `fim runs show|cancel` and `fim workflow show|resume` take them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.errors import RunError

if TYPE_CHECKING:
    from fim.store import Store

LAST = "last"
"""The word for the newest run."""

MAX_LISTED = 10
"""The runs an ambiguous prefix lists."""

LISTED = "`fim runs list` shows the runs"


async def resolve_run(
    store: Store,
    typed: str,
    *,
    name: str | None = None,
    kind: str | None = None,
    missing_ok: bool = False,
) -> str:
    """The id of the run `typed` names in `store`, among the runs of `kind` (agent or
    workflow) and `name` (the agent's or workflow's) when given. RunError when there is no
    such run (with `missing_ok`: `typed` itself, for a caller whose own lookup says so),
    or when a prefix is shared by several (they are listed)."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from fim.store.schema import table

    runs = table("runs")
    query = runs.select().with_only_columns(runs.c.id, runs.c.kind, runs.c.name, runs.c.status)
    for column, value in (("kind", kind), ("name", name)):
        if value is not None:
            query = query.where(runs.c[column] == value)
    query = query.order_by(runs.c.created_at.desc())
    of = f" of {kind or 'run'} '{name}'" if name is not None else ""
    if typed == LAST:
        newest = await _rows(store, query.limit(1))
        if not newest:
            raise RunError(f"no runs{of} in {store.display_url}", hint=LISTED)
        return str(newest[0]["id"])
    exact = await _rows(store, query.where(runs.c.id == typed).limit(1))
    if exact:
        return typed
    found = await _rows(
        store, query.where(runs.c.id.startswith(typed, autoescape=True)).limit(MAX_LISTED + 1)
    )
    if not typed or not found:
        if missing_ok:
            return typed
        raise RunError(f"no run '{typed}'{of}", hint=LISTED)
    if len(found) == 1:
        return str(found[0]["id"])
    listed = ", ".join(
        f"{row['id']} ({row['kind']} {row['name']}, {row['status']})" for row in found[:MAX_LISTED]
    )
    more = ", ..." if len(found) > MAX_LISTED else ""
    raise RunError(
        f"run id '{typed}' is ambiguous: it starts {listed}{more}", hint="type more of the id"
    )


async def _rows(store: Store, query: Any) -> list[dict[str, Any]]:
    rows = await store._read(lambda c: c.execute(query).mappings().all())
    return [dict(row) for row in rows]
