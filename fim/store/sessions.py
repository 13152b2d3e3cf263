"""Agent sessions (the conversation behind a `session_id`) in the state store.

In the store rather than in a server's memory so that every replica on one PostgreSQL
store continues the same conversation, whichever replica the load balancer picks, and a
restart loses none. A session belongs to the hash of the API key that created it, kept
under the id `fim.run.sessions` derives from that owner and the caller's name for it (so
two keys' names never meet); a write by another owner is refused.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

from fim.store.schema import keep_newest, table
from fim.types import Message

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from fim.store import Store

SESSION_LIMIT = 1000
"""Sessions kept per owner (API key or tenant; one for a server without keys and the
CLI); each owner's least recently used beyond it are dropped. Per owner, not per store:
one key making many sessions dropped every other key's."""
_PRUNE_EVERY = 64
SESSION_MAX_BYTES = 4 * 1024 * 1024
"""The JSON a session keeps at most: its newest turns. Each turn rewrote the whole
conversation and each run read it whole, so one caller sending 1 MiB turns could grow a
session, and every later run of it, without end; a model sees far less than this anyway
(its context guard compacts what is sent)."""


class Sessions:
    def __init__(self, store: Store, limit: int = SESSION_LIMIT) -> None:
        self.store = store
        self.limit = limit
        self._writes = 0

    async def load(self, session_id: str) -> tuple[str, list[Message]] | None:
        """(owner hash, conversation) of a session, None when there is none."""
        sessions = table("sessions")
        query = sessions.select().where(sessions.c.id == session_id)
        row = await self.store._read(lambda c: c.execute(query).mappings().first())
        if row is None:
            return None
        return row["owner"], [Message.model_validate(m) for m in row["messages"]]

    async def delete(self, session_id: str, owner: str) -> bool:
        """Forget a session this owner made; False when there is none of its."""
        sessions = table("sessions")
        query = sessions.delete().where(sessions.c.id == session_id, sessions.c.owner == owner)
        return bool(await self.store._tx(lambda c: c.execute(query).rowcount))

    async def owned(self, owner: str, limit: int) -> list[tuple[str | None, str, float]]:
        """(name, id, last update) of this owner's sessions, the most recent first."""
        rows = await self.listed(limit, owner=owner)
        return [(row["name"], row["id"], row["updated_at"]) for row in rows]

    async def listed(
        self, limit: int, *, owner: str | None = None, named: str | None = None
    ) -> list[dict[str, Any]]:
        """Sessions (id, name, owner, last update), the most recent first: of one owner,
        or every owner's (`fim sessions`, an operator's); `named`: only those whose name
        or id it is."""
        sessions = table("sessions")
        columns = (sessions.c.id, sessions.c.name, sessions.c.owner, sessions.c.updated_at)
        query = sessions.select().with_only_columns(*columns)
        if owner is not None:
            query = query.where(sessions.c.owner == owner)
        if named is not None:
            query = query.where((sessions.c.name == named) | (sessions.c.id == named))
        query = query.order_by(sessions.c.updated_at.desc()).limit(limit)
        rows = await self.store._read(lambda c: c.execute(query).mappings().all())
        return [dict(row) for row in rows]

    async def save(
        self, session_id: str, owner: str, messages: list[Message], name: str | None = None
    ) -> bool:
        """Store the conversation (`name`: what the caller calls it, for listing by name);
        False (nothing written) when another key owns the session, so two callers' turns
        never mix."""
        dumped = newest([m.model_dump(mode="json", exclude_defaults=True) for m in messages])
        self._writes += 1
        prune = self._writes % _PRUNE_EVERY == 0
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy.exc import IntegrityError

        try:
            return await self.store._tx(
                lambda c: self._save(c, session_id, owner, dumped, prune, name)
            )
        except IntegrityError:  # another replica created the session meanwhile: recheck
            return await self.store._tx(
                lambda c: self._save(c, session_id, owner, dumped, False, name)
            )

    def _save(
        self,
        conn: Connection,
        session_id: str,
        owner: str,
        messages: list[dict[str, Any]],
        prune: bool,
        name: str | None = None,
    ) -> bool:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import select

        sessions = table("sessions")
        now = time.time()
        # The row is locked (PostgreSQL) or the database is (SQLite's BEGIN IMMEDIATE)
        # from here to the commit: ownership cannot change between the check and the write.
        current = conn.execute(
            select(sessions.c.owner).where(sessions.c.id == session_id).with_for_update()
        ).scalar()
        if current is None:
            conn.execute(
                sessions.insert().values(
                    id=session_id, owner=owner, messages=messages, updated_at=now, name=name
                )
            )
        elif current != owner:
            return False
        else:
            conn.execute(
                sessions.update()
                .where(sessions.c.id == session_id)
                .values(messages=messages, updated_at=now, **({"name": name} if name else {}))
            )
        if prune:  # per owner: one key's many sessions never push out another's
            keep_newest(conn, "sessions", owner, self.limit)
        return True


def newest(messages: list[dict[str, Any]], limit: int | None = None) -> list[dict[str, Any]]:
    """The newest `messages` that fit in `limit` bytes of JSON (`SESSION_MAX_BYTES`), from
    the start of a turn (a user message), the last one always kept."""
    limit = SESSION_MAX_BYTES if limit is None else limit
    size, start = 0, len(messages)
    for index in range(len(messages) - 1, -1, -1):
        size += len(orjson.dumps(messages[index]))
        if size > limit and index < len(messages) - 1:
            break
        start = index
    while start < len(messages) - 1 and messages[start].get("role") != "user":
        start += 1  # not the middle of a turn
    return messages if start == 0 else messages[start:]
