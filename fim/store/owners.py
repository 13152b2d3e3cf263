"""Who started a run over HTTP, so that only they can read it back.

A server with `server.api_keys` gives each key its own sessions (`fim.store.sessions`);
the runs a key starts carry that key's conversation too (the input, the answer, every tool
call), so `GET /v1/runs`, `GET /v1/runs/{id}` and its event stream show a run only to the
key that started it. The owner is the same hash of the key the sessions use, never the key.
A run with no owner row (started by `fim run`, `fim eval` or a worker's own schedule) is
shown to no keyed caller: the check fails closed. A server without keys records nothing
and checks nothing: anyone who can reach it may read any run, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fim.store.schema import table

if TYPE_CHECKING:
    from fim.store import Store


async def claim(store: Store, run_id: str, owner: str) -> None:
    """Record `owner` as the caller who started `run_id`, before anyone can ask for it."""
    rows = table("run_owners")
    await store._tx(lambda conn: conn.execute(rows.insert().values(run_id=run_id, owner=owner)))


async def owner_of(store: Store, run_id: str) -> str | None:
    """The owner recorded for `run_id`; None when it has none."""
    rows = table("run_owners")
    query = rows.select().where(rows.c.run_id == run_id)
    row = await store._read(lambda conn: conn.execute(query).mappings().first())
    return None if row is None else str(row["owner"])


async def may_read(store: Store, run_id: str, owner: str) -> bool:
    """Whether a caller (`owner`: the hash of its key, "" when the server has no keys) may
    see run `run_id`."""
    return not owner or await owner_of(store, run_id) == owner
