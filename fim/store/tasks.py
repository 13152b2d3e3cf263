"""The A2A surface's tasks in the state store, each owner's most recent ones.

A task (its status, its history, its artifacts) is what an A2A client reads back with
`tasks/get`; kept in the store, every replica on one PostgreSQL store answers for it and a
restart loses none. Each owner (API key or tenant) keeps its `limit` most recently saved
tasks: a client sending messages without end does not grow the store without end, and
each task is at most `TASK_MAX_BYTES` (`fim.server.a2a_tasks` fits it before saving). The
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
TASK_MAX_BYTES = 1024 * 1024
"""The protobuf bytes a stored task holds at most (base64 in the row: about 1.4 MB). A task
is what an A2A client reads back: the turn it sent, the answer and the final status; the
run itself (every event, the whole output) is the run's record (`GET /v1/runs/{id}`). The
task is rewritten at each of its saves and read whole by `tasks/get`, and `tasks/list`
reads up to `TASKS_PER_OWNER` of them at once, so this is what each costs at most, and an
owner's tasks are at most 256 of it. 1 MiB is the default request body
(`server.max_body_bytes`): a turn of any default-sized request is kept whole, and so is a
long answer. A task of one run's every event as a status message reached 3.2 MB (3,234
events) and grew with each further one."""


class Tasks:
    def __init__(
        self, store: Store, limit: int | None = None, max_bytes: int | None = None
    ) -> None:
        self.store = store
        self.limit = limit or TASKS_PER_OWNER
        self.max_bytes = max_bytes or TASK_MAX_BYTES

    async def save(self, owner: str, task_id: str, task: dict[str, Any]) -> None:
        """Store the task as it is now; the owner's oldest beyond `limit` go. The caller
        has fitted it to `max_bytes` (the store does not read what a task holds)."""
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


__all__ = ["TASKS_PER_OWNER", "TASK_MAX_BYTES", "Tasks"]
