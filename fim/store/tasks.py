"""The A2A surface's tasks in the state store, each owner's most recent ones.

A task (its status, its history, its artifacts) is what an A2A client reads back with
`tasks/get`; kept in the store, every replica on one PostgreSQL store answers for it and a
restart loses none. Each owner (API key or tenant) keeps its `limit` most recently saved
tasks: a client sending messages without end does not grow the store without end. The
store keeps the task as JSON it does not read; `fim.server.a2a_tasks` converts.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fim.store.schema import keep_newest, table

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fim.store import Store

TASKS_PER_OWNER = 256


class Tasks:
    def __init__(self, store: Store, limit: int | None = None) -> None:
        self.store = store
        self.limit = limit or TASKS_PER_OWNER

    async def save(self, owner: str, task_id: str, task: dict[str, Any]) -> None:
        """Store the task as it is now; the owner's oldest beyond `limit` go."""
        await self.store._tx(lambda conn: self._save(conn, owner, task_id, task))

    def _save(self, conn: Connection, owner: str, task_id: str, task: dict[str, Any]) -> None:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import select

        tasks = table("a2a_tasks")
        mine = (tasks.c.id == task_id) & (tasks.c.owner == owner)
        values = {"task": task, "updated_at": time.time()}
        if conn.execute(tasks.update().where(mine).values(**values)).rowcount:
            return
        if conn.execute(select(tasks.c.id).where(tasks.c.id == task_id)).first() is not None:
            return  # another owner's task of that id: never written over
        conn.execute(tasks.insert().values(id=task_id, owner=owner, **values))
        keep_newest(conn, "a2a_tasks", owner, self.limit)

    async def get(self, owner: str, task_id: str) -> dict[str, Any] | None:
        tasks = table("a2a_tasks")
        query = tasks.select().where(tasks.c.id == task_id, tasks.c.owner == owner)
        row = await self.store._read(lambda c: c.execute(query).mappings().first())
        return dict(row["task"]) if row is not None else None

    async def owned(self, owner: str) -> list[dict[str, Any]]:
        """The owner's tasks, the most recent first."""
        tasks = table("a2a_tasks")
        query = (
            tasks.select()
            .where(tasks.c.owner == owner)
            .order_by(tasks.c.updated_at.desc())
            .limit(self.limit)
        )
        rows = await self.store._read(lambda c: c.execute(query).mappings().all())
        return [dict(row["task"]) for row in rows]

    async def delete(self, owner: str, task_id: str) -> None:
        tasks = table("a2a_tasks")
        statement = tasks.delete().where(tasks.c.id == task_id, tasks.c.owner == owner)
        await self.store._tx(lambda c: c.execute(statement))


__all__ = ["TASKS_PER_OWNER", "Tasks"]
