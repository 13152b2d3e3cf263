"""The A2A surface's task store: the SDK's in-memory store, bounded per key.

The SDK keeps every task it was ever given, with its history (a fim run's status updates
included), for as long as the process lives: a client sending messages without end grew
the server's memory without end. Here each owner (API key or tenant, `fim.run.sessions`)
keeps its `limit` most recently saved tasks; older ones are forgotten (`tasks/get` of one
is then "task not found", as after a restart). A task still running is saved at each of
its updates, so it is among the most recent.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore

TASKS_PER_OWNER = 256


class BoundedTaskStore(TaskStore):
    """`InMemoryTaskStore`, keeping each owner's `limit` most recently saved tasks."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit or TASKS_PER_OWNER
        self._tasks = InMemoryTaskStore()
        self._recent: dict[str, OrderedDict[str, None]] = {}
        """Owner -> its task ids, least recently saved first."""

    async def save(self, task: Any, context: Any) -> None:
        await self._tasks.save(task, context)
        recent = self._recent.setdefault(resolve_user_scope(context), OrderedDict())
        recent[task.id] = None
        recent.move_to_end(task.id)
        while len(recent) > self.limit:
            oldest, _ = recent.popitem(last=False)
            await self._tasks.delete(oldest, context)  # the same owner's: the same scope

    async def get(self, task_id: str, context: Any) -> Any:
        return await self._tasks.get(task_id, context)

    async def list(self, params: Any, context: Any) -> Any:
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: Any) -> None:
        self._recent.get(resolve_user_scope(context), OrderedDict()).pop(task_id, None)
        await self._tasks.delete(task_id, context)

    def held(self, owner: str) -> int:
        """How many tasks `owner` has in the store."""
        return len(self._recent.get(owner, ()))


__all__ = ["TASKS_PER_OWNER", "BoundedTaskStore"]
