"""A run's stored events read in batches bounded by size (`fim.store.live.read_batch`).

A follower of a run (`GET /v1/runs/{id}/events`) holds one batch at a time while its
client reads, or does not. A count of events was no bound: 1,000 tokens of 4 KB each are
4 MB per follower, and 300 followers that never read one finished run took a server to
4.6 GB (attack-55 F1). Here a batch stops before the event that would take it past
`BATCH_BYTES` of stored JSON, and the rows are fetched a few at a time (PostgreSQL: a
server-side cursor), so those past the bound are never loaded.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fim.store.schema import table

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.store import Store

BATCH_BYTES = 256 * 1024
"""How much stored event JSON (UTF-8) one batch of a follower holds at most."""

STREAMED_ROWS = 64
"""Rows fetched from the database at a time while a batch is read."""


async def stored_batch(
    store: Store, run_id: str, after: int, limit: int, max_bytes: int | None
) -> tuple[list[tuple[int, dict[str, Any]]], bool]:
    """At most `limit` `(seq, event)` of run `run_id` after `after` in the store's table,
    oldest first, stopping before the event that would take the batch past `max_bytes`
    (an event larger than that comes alone); and whether more may be stored."""
    # deferred: a third-party package, loaded only when this path runs
    from sqlalchemy import Text, cast, select

    events = table("run_events")
    query = (
        select(events.c.seq, cast(events.c.event, Text))
        .where(events.c.run_id == run_id, events.c.seq > after)
        .order_by(events.c.seq)
        .limit(limit)
        .execution_options(yield_per=STREAMED_ROWS)
    )

    def read(conn: Connection) -> tuple[list[tuple[int, str]], bool]:
        taken: list[tuple[int, str]] = []
        total = 0
        with conn.execute(query) as result:
            for seq, text in result:
                size = len(text) if text.isascii() else len(text.encode())
                if max_bytes is not None and taken and total + size > max_bytes:
                    return taken, True
                taken.append((int(seq), text))
                total += size
        return taken, len(taken) == limit

    rows, more = await store._tx(read)
    return [(seq, json.loads(text)) for seq, text in rows], more
