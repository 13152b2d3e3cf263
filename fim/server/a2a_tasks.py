"""The A2A surface's task store: the tasks in the state store (`fim.store.tasks`).

The SDK's in-memory store kept every task for the life of the process, in that process
only: memory grew with every message, and a client asking another replica (or the same one
after a restart) for its task heard "task not found". Here a task is saved to the state
store (protobuf's own bytes), scoped by owner as the SDK scopes it (another key's task is
not there), and each owner keeps its most recent `TASKS_PER_OWNER`. Listing (`tasks/list`)
reads the owner's tasks and lets the SDK's own in-memory store filter and page them, so its
semantics are the SDK's.

What a save writes, and how much:

- The SDK saves the whole task at every event its executor sends, and a run sends one
  `working` status update per run event (thousands in a long run: 3,234 events were as many
  rewrites of a task that grew to 3.2 MB, 5 GB written for one message). A save is written
  only when it changes the task's shape: its state, its client's turns in the history (the
  count: the SDK only appends to it), its artifacts. One that changes only the status'
  timestamp or message, the agent's messages in the history (the status messages the run's
  progress said, which a stored task does not keep) and the task's metadata is not: while
  the task runs, the SDK holds it in memory and streams it from there, and the next save
  that is written (the task's end at the latest) carries the progress too. So a task costs
  the store a few writes whatever the length of its run; a `tasks/get` while it runs sees
  its state, not each event.
- A stored task is fitted (`fitted`): its history to the turn that started it and the
  newest `HISTORY_KEPT - 1`, then to `Tasks.max_bytes` (`TASK_MAX_BYTES`), the largest
  parts cut first. The client of `message/send` / `message/stream` got the task whole; what
  is cut is what a later `tasks/get` reads.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Any

from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import a2a_pb2 as pb

from fim.store import get_store
from fim.store.tasks import Tasks

if TYPE_CHECKING:
    from fim.server.api import Api

HISTORY_KEPT = 16
"""History messages a stored task keeps: the turn that started it and the newest 15. A fim
task's history is its client's turn and the status messages its run said (the SDK appends
each one a task moves past): the answer, each tool call, a progress line; not one per event
(`fim.server.a2a_progress`), so a task of a short run has fewer than this."""
_SHAPES_KEPT = 4096
"""Tasks whose last written shape this process remembers. Each is forgotten at its task's
end (a terminal state); a task dropped past this many is written at its next save, as if
its shape had changed, which costs one write and loses nothing."""
_TERMINAL = {
    pb.TaskState.TASK_STATE_COMPLETED,
    pb.TaskState.TASK_STATE_FAILED,
    pb.TaskState.TASK_STATE_CANCELED,
    pb.TaskState.TASK_STATE_REJECTED,
}


class StoredTaskStore(TaskStore):
    """The SDK's `TaskStore`, on the state store."""

    def __init__(self, api: Api) -> None:
        self.api = api
        # (owner, task id) -> the shape of the task as last written by this process
        self._written: dict[tuple[str, str], tuple[Any, ...]] = {}

    def _tasks(self) -> Tasks:
        return Tasks(get_store(self.api.services))

    async def save(self, task: Any, context: Any) -> None:
        """Write the task, fitted to the store's cap, when its shape changed since this
        process last wrote it (module docstring): the SDK calls this at every event."""
        owner = resolve_user_scope(context)
        key, shape = (owner, task.id), _shape(task)
        if self._written.get(key) == shape:
            return  # progress only: written with the task's next change (module docstring)
        tasks = self._tasks()
        # protobuf's own bytes (C, fast), not a Python walk of the task
        kept = fitted(_turns(task), tasks.max_bytes).SerializeToString()
        await tasks.save(owner, task.id, {"pb": base64.b64encode(kept).decode()})
        self._written.pop(key, None)
        if task.status.state not in _TERMINAL:  # nothing follows a terminal state
            self._written[key] = shape
            if len(self._written) > _SHAPES_KEPT:
                del self._written[next(iter(self._written))]

    async def get(self, task_id: str, context: Any) -> Any:
        data = await self._tasks().get(resolve_user_scope(context), task_id)
        return _task(data) if data is not None else None

    async def list(self, params: Any, context: Any) -> Any:
        scratch = InMemoryTaskStore(use_copying=False)
        for data in await self._tasks().owned(resolve_user_scope(context)):
            await scratch.save(_task(data), context)
        return await scratch.list(params, context)

    async def delete(self, task_id: str, context: Any) -> None:
        owner = resolve_user_scope(context)
        self._written.pop((owner, task_id), None)
        await self._tasks().delete(owner, task_id)


def _shape(task: pb.Task) -> tuple[Any, ...]:
    """What a save must write when it changes: the state, the client's turns in the history
    (the SDK only appends to it) and the artifacts (a digest: an artifact can be replaced
    under its id). Not the status' timestamp and message nor the task's metadata, which each
    progress update changes, nor the agent's messages in the history: the status messages
    of the run's progress (`fim.server.a2a_progress`), which the SDK moves there one by
    one and a stored task does not keep (`_turns`)."""
    artifacts = hashlib.blake2b(digest_size=16)
    for artifact in task.artifacts:
        artifacts.update(artifact.SerializeToString(deterministic=True))
    turns = sum(1 for m in task.history if m.role != pb.Role.ROLE_AGENT)
    return task.status.state, turns, artifacts.digest()


def _turns(task: pb.Task) -> pb.Task:
    """The task with the client's turns alone in its history: the agent's messages there are
    the status messages its run's progress said (`fim.server.a2a_progress`), streamed to its
    clients and kept whole in the run's event log, so a stored task does not grow with its
    run. The task itself is not changed (the SDK holds it)."""
    if all(m.role != pb.Role.ROLE_AGENT for m in task.history):
        return task
    kept = pb.Task()
    kept.CopyFrom(task)
    del kept.history[:]
    kept.history.extend(m for m in task.history if m.role != pb.Role.ROLE_AGENT)
    return kept


def fitted(task: pb.Task, max_bytes: int) -> pb.Task:
    """The task as it is stored, at most `max_bytes` of protobuf: its history cut to the
    turn that started it and the newest `HISTORY_KEPT - 1`; then, while it is larger, its
    largest parts (history, status message, artifacts) cut to their head; past that (its
    size is in metadata a client sent), its state and a note alone. The task itself is
    not changed (the SDK holds it, and streams it)."""
    if len(task.history) <= HISTORY_KEPT and task.ByteSize() <= max_bytes:
        return task
    kept = pb.Task()
    kept.CopyFrom(task)
    if len(kept.history) > HISTORY_KEPT:
        del kept.history[1 : len(kept.history) - HISTORY_KEPT + 1]
    parts = [p for m in (*kept.history, kept.status.message) for p in m.parts]
    parts += [p for a in kept.artifacts for p in a.parts]
    for part in sorted(parts, key=lambda p: p.ByteSize(), reverse=True):
        over = kept.ByteSize() - max_bytes
        if over <= 0:
            break
        _cut(part, over, max_bytes)
    return kept if kept.ByteSize() <= max_bytes else _note(task, max_bytes)


def _cut(part: pb.Part, over: int, max_bytes: int) -> None:
    """Make a part at least `over` bytes smaller: a text to its head and a note of the cut
    (a character is at least a byte: cutting `over` and the note's length of them is
    enough), any other part (file, data, raw bytes), or a text shorter than that, to a
    note alone if the note is smaller."""
    why = f"a stored A2A task is at most {max_bytes} bytes; its run keeps it whole"
    note = f" [cut: {why}]"
    keep = len(part.text) - over - len(note) if part.HasField("text") else 0
    if keep > 0:
        part.text = part.text[:keep] + note
        return
    size = part.ByteSize()
    instead = f"[a part of {size} bytes, not kept: {why}]"
    if len(instead) < size:  # a smaller part is left as it is
        part.Clear()
        part.text = instead


def _note(task: pb.Task, max_bytes: int) -> pb.Task:
    """The task's id, context, state and run, and why nothing else is kept."""
    kept = pb.Task(id=task.id, context_id=task.context_id)
    kept.status.state = task.status.state
    kept.status.timestamp.CopyFrom(task.status.timestamp)
    why = f"this task was larger than {max_bytes} bytes stored; its run keeps it whole"
    kept.status.message.CopyFrom(
        pb.Message(
            message_id=f"{task.id}-cut",
            role=pb.Role.ROLE_AGENT,
            task_id=task.id,
            context_id=task.context_id,
            parts=[pb.Part(text=why)],
        )
    )
    if "run_id" in task.metadata.fields:
        kept.metadata["run_id"] = task.metadata.fields["run_id"].string_value
    return kept


def _task(data: dict[str, Any]) -> Any:
    task = pb.Task()
    task.ParseFromString(base64.b64decode(data["pb"]))
    return task


__all__ = ["HISTORY_KEPT", "StoredTaskStore", "fitted"]
