"""A2A `tasks/cancel` and `tasks/resubscribe` for a task whose run goes on in another
process of the same PostgreSQL store (`fim serve --workers N`, replicas) (attack-63 F1).

The SDK keeps its running tasks in memory, per process. A cancel taken by a process that
does not run the task only wrote `canceled` into the shared task store and answered so,
while the run went on in the other process: waiting on an approval, it ran its guarded
tool once approved, and the task then flipped to `completed`. Here such a cancel leaves a
request in the store (a row of `CANCELS`, a reserved owner of the task table no API key
hashes to) and waits for its task to end:

- each process running A2A tasks on a shared store reads the requests every `POLL` seconds
  while it runs any (`Here`), and cancels the ones it runs as a local cancel does (the
  run stops, is recorded `cancelled`, what it waited on for approval expires, the task is
  stored `canceled`);
- the cancel answers what the task became: `canceled`, or not cancelable when its run
  ended first (a finished task keeps its final state);
- when nothing stopped it within `CANCEL_WAIT` seconds (its process is gone or stuck), the
  approvals its run waits on are denied, so it can never resume; the task is then recorded
  `canceled` if that was so, or if its run has ended; otherwise the cancel is refused.

A resubscription taken by such a process follows the stored task (`tail`): its snapshot,
then each change of its state or artifacts, until it ends or waits for input.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.request_handler import validate_request_params
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from fim.store import get_store
from fim.store.tasks import Tasks
from fim.tasks import spawn

if TYPE_CHECKING:
    from fim.server.a2a_tasks import StoredTaskStore
    from fim.server.api import Api

log = logging.getLogger("fim.server")

CANCELS = "fim:a2a-cancel"
"""The owner of the cancel requests' rows in the task table (an owner is a 64-digit hash)."""
POLL = 0.25
"""Seconds between two reads of the cancel requests (or of a followed task)."""
CANCEL_WAIT = 10.0
"""Seconds a cancel waits for the process running its task to stop it."""
ENDED = {
    pb.TaskState.TASK_STATE_COMPLETED,
    pb.TaskState.TASK_STATE_FAILED,
    pb.TaskState.TASK_STATE_CANCELED,
    pb.TaskState.TASK_STATE_REJECTED,
}
PAUSED = {pb.TaskState.TASK_STATE_INPUT_REQUIRED, pb.TaskState.TASK_STATE_AUTH_REQUIRED}
RUN_ENDED = {"ok", "error", "failed", "cancelled", "max_iterations"}


def shared(api: Api) -> bool:
    """Whether other processes may run this store's A2A tasks (PostgreSQL)."""
    return get_store(api.services).url.startswith("postgresql")


def request_id(task_id: str) -> str:
    """The id of task `task_id`'s cancel request (task ids are the table's keys too)."""
    return "c" + hashlib.blake2b(task_id.encode(), digest_size=16).hexdigest()


def run_of(task: pb.Task) -> str:
    field = task.metadata.fields.get("run_id")
    return field.string_value if field is not None else ""


class Here:
    """The A2A tasks whose runs go on in this process (task id -> owner) and, on a shared
    store, the watch that stops the ones whose cancel another process took (`stop`: the
    local cancel of task id, owner)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.tasks: dict[str, str] = {}
        self.stop: Callable[[str, str], Awaitable[Any]] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping: set[str] = set()

    def elsewhere(self, task_id: str) -> bool:
        """Whether a task not run here may be run by another process."""
        return task_id not in self.tasks and shared(self.api)

    @contextlib.contextmanager
    def running(self, task_id: str, owner: str) -> Iterator[None]:
        self.tasks[task_id] = owner
        if shared(self.api) and (self._watch is None or self._watch.done()):
            self._watch = spawn(self._watching())
        try:
            yield
        finally:
            self.tasks.pop(task_id, None)

    async def _watching(self) -> None:
        tasks = Tasks(get_store(self.api.services))
        while self.tasks:
            try:
                asked = await tasks.owned(CANCELS)
            except Exception as exc:  # the next read may succeed
                log.warning("cannot read the A2A cancel requests: %s", exc)
                asked = []
            for request in asked:
                task_id, owner = str(request.get("task")), str(request.get("owner"))
                if self.tasks.get(task_id) == owner and task_id not in self._stopping:
                    self._stopping.add(task_id)
                    spawn(self._stop(tasks, task_id, owner))
            await asyncio.sleep(POLL)

    async def _stop(self, tasks: Tasks, task_id: str, owner: str) -> None:
        try:
            if self.stop is not None:
                await self.stop(task_id, owner)
        except TaskNotCancelableError:
            pass  # it ended first: its final state stands
        except Exception:
            log.exception("A2A task %s: could not cancel it for another process", task_id)
        finally:
            self._stopping.discard(task_id)
            with contextlib.suppress(Exception):
                await tasks.delete(CANCELS, request_id(task_id))


async def cancel_elsewhere(
    api: Api,
    task: pb.Task,
    owner: str,
    read: Callable[[], Awaitable[pb.Task | None]],
    write: Callable[[pb.Task], Awaitable[None]],
) -> pb.Task:
    """Cancel `task`, of `owner`, run by another process (module docstring); `read` and
    `write` are the task's in the store."""
    store = get_store(api.services)
    tasks = Tasks(store)
    asked = {"task": task.id, "owner": owner, "at": time.time()}
    await tasks.save(CANCELS, request_id(task.id), asked)
    deadline = time.monotonic() + CANCEL_WAIT
    now: pb.Task | None = task
    while time.monotonic() < deadline:
        await asyncio.sleep(POLL)
        now = await read()
        if now is None:
            raise TaskNotFoundError
        if now.status.state in ENDED:
            await tasks.delete(CANCELS, request_id(task.id))
            if now.status.state == pb.TaskState.TASK_STATE_CANCELED:
                return now
            state = pb.TaskState.Name(now.status.state)
            raise TaskNotCancelableError(
                message=f"Task cannot be canceled - its run ended: {state}"
            )
    # nobody stopped it: its process is gone or stuck. The request stays for it.
    last = now if now is not None else task
    run_id, denied = run_of(last), 0
    for approval in await store.list_approvals("pending") if run_id else []:
        if approval.run_id == run_id:
            await store.resolve_approval(approval.id, False, by="cancel")
            denied += 1
    record = await store.get_run(run_id) if run_id else None
    if not denied and (record is None or record.status not in RUN_ENDED):
        raise TaskNotCancelableError(
            message=f"Task cannot be canceled now - the server process running it did not "
            f"stop it within {CANCEL_WAIT:g} s; try again"
        )
    log.warning("A2A task %s: nothing stopped its run %s; recorded canceled", task.id, run_id)
    canceled = pb.Task()
    canceled.CopyFrom(last)
    canceled.status.state = pb.TaskState.TASK_STATE_CANCELED
    await write(canceled)
    return canceled


async def tail(api: Api, read: Callable[[], Awaitable[pb.Task | None]]) -> AsyncIterator[Any]:
    """A resubscription to a task another process runs: the stored task, then a status
    update at each change of its state and an artifact update for each new artifact, until
    it ends or waits for input (as the SDK's own remote subscription), or the server stops."""
    task = await read()
    if task is None:
        raise TaskNotFoundError
    yield task
    state, seen = task.status.state, {a.artifact_id for a in task.artifacts}
    while not api.stopping:
        await asyncio.sleep(POLL)
        now = await read()
        if now is None:
            return
        for artifact in now.artifacts:
            if artifact.artifact_id not in seen:
                seen.add(artifact.artifact_id)
                yield pb.TaskArtifactUpdateEvent(
                    task_id=now.id, context_id=now.context_id, artifact=artifact, last_chunk=True
                )
        if now.status.state != state:
            state = now.status.state
            yield pb.TaskStatusUpdateEvent(
                task_id=now.id, context_id=now.context_id, status=now.status
            )
            if state in ENDED | PAUSED:
                return


class Handler(DefaultRequestHandler):
    """The SDK's request handler, whose cancel and resubscription of a task another process
    runs go through the store (module docstring); `here` is the executor's, `caller` the
    call context of an owner (the local cancel of a request another process took)."""

    def __init__(
        self,
        api: Api,
        here: Here,
        caller: Callable[[str], ServerCallContext],
        task_store: StoredTaskStore,
        **kwargs: Any,
    ) -> None:
        super().__init__(task_store=task_store, **kwargs)
        self.api, self.here, self.stored = api, here, task_store

        async def stop(task_id: str, owner: str) -> Any:
            return await super(Handler, self).on_cancel_task(
                pb.CancelTaskRequest(id=task_id), caller(owner)
            )

        here.stop = stop

    @validate_request_params
    async def on_cancel_task(self, params: Any, context: ServerCallContext) -> Any:
        if not self.here.elsewhere(params.id):
            return await super().on_cancel_task(params, context)
        task = await self.stored.get(params.id, context)
        if task is None:
            raise TaskNotFoundError
        if task.status.state in ENDED:
            state = pb.TaskState.Name(task.status.state)
            raise TaskNotCancelableError(
                message=f"Task cannot be canceled - current state: {state}"
            )
        return await cancel_elsewhere(
            self.api,
            task,
            context.user.user_name,
            lambda: self.stored.get(params.id, context),
            lambda done: self.stored.save(done, context),
        )

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: Any, context: ServerCallContext
    ) -> AsyncIterator[Any]:
        if not self.here.elsewhere(params.id):
            async for event in super().on_subscribe_to_task(params, context):
                yield event
            return
        task = await self.stored.get(params.id, context)
        if task is None:
            raise TaskNotFoundError
        if task.status.state in ENDED:  # as the SDK: nothing further to stream
            state = pb.TaskState.Name(task.status.state)
            raise UnsupportedOperationError(
                message=f"Task {params.id} is in terminal state: {state}"
            )
        async for event in tail(self.api, lambda: self.stored.get(params.id, context)):
            yield event


__all__ = ["CANCELS", "Handler", "Here", "cancel_elsewhere", "shared", "tail"]
