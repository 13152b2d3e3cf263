"""The A2A surface's task store: the tasks in the state store (`fim.store.tasks`).

The SDK's in-memory store kept every task for the life of the process, in that process
only: memory grew with every message, and a client asking another replica (or the same one
after a restart) for its task heard "task not found". Here a task is saved to the state
store (protobuf's own bytes) at each of its updates, scoped by owner as the SDK scopes it
(another key's task is not there), and each owner keeps its most recent `TASKS_PER_OWNER`. Listing
(`tasks/list`) reads the owner's tasks and lets the SDK's own in-memory store filter and
page them, so its semantics are the SDK's.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import a2a_pb2 as pb

from fim.store import get_store
from fim.store.tasks import Tasks

if TYPE_CHECKING:
    from fim.server.api import Api


class StoredTaskStore(TaskStore):
    """The SDK's `TaskStore`, on the state store."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def _tasks(self) -> Tasks:
        return Tasks(get_store(self.api.services))

    async def save(self, task: Any, context: Any) -> None:
        # protobuf's own bytes (C, fast): the task is saved at every status update of its
        # run and its history grows with each, so a Python walk of it cost the loop O(n^2)
        data = {"pb": base64.b64encode(task.SerializeToString()).decode()}
        await self._tasks().save(resolve_user_scope(context), task.id, data)

    async def get(self, task_id: str, context: Any) -> Any:
        data = await self._tasks().get(resolve_user_scope(context), task_id)
        return _task(data) if data is not None else None

    async def list(self, params: Any, context: Any) -> Any:
        scratch = InMemoryTaskStore(use_copying=False)
        for data in await self._tasks().owned(resolve_user_scope(context)):
            await scratch.save(_task(data), context)
        return await scratch.list(params, context)

    async def delete(self, task_id: str, context: Any) -> None:
        await self._tasks().delete(resolve_user_scope(context), task_id)


def _task(data: dict[str, Any]) -> Any:
    task = pb.Task()
    task.ParseFromString(base64.b64decode(data["pb"]))
    return task


__all__ = ["StoredTaskStore"]
