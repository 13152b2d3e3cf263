"""Tasks whose first step runs at once, as Python 3.12's eager tasks do.

A turn's tool calls each run in a task of their own (concurrently, with their live events
streamed while they run). Most calls — the calculator, most builtins — finish without ever
suspending; for them a task meant a loop iteration to start it and another to hear that it
was done. `start` takes the first step right away, inside the new task: the task is the
current one during that step (`asyncio.current_task()`, which `asyncio.timeout` and task
groups capture), the step runs in the task's own copy of the context, and a call that
suspends simply continues in its task. A call that finished is handed back as a completed
future, so nothing waits for its task.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")

_EAGER_NATIVE = sys.version_info >= (3, 12)


def start(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """`asyncio.create_task(coro)` with its first step taken now: the task, or a completed
    future with its result or exception when it finished in that step."""
    loop = asyncio.get_running_loop()
    if _EAGER_NATIVE:  # pragma: no cover - the runtime here is 3.11
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg]
    outer = asyncio.current_task(loop)
    if outer is None:  # not inside a task: nothing to swap
        return loop.create_task(coro)
    context = contextvars.copy_context()
    resume = _Resume(coro)
    task = loop.create_task(resume, context=context)
    asyncio.tasks._leave_task(loop, outer)
    asyncio.tasks._enter_task(loop, task)
    try:
        resume.pending = context.run(coro.send, None)
    except StopIteration as done:
        resume.finished = True
        future: asyncio.Future[T] = loop.create_future()
        future.set_result(done.value)
        return future
    except BaseException as exc:  # the task's outcome: given to whoever reads the future
        resume.finished = True
        future = loop.create_future()
        if isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise  # as a task does: these stop the loop
        return future
    finally:
        asyncio.tasks._leave_task(loop, task)
        asyncio.tasks._enter_task(loop, outer)
    return task


class _Resume(Coroutine[Any, Any, Any]):
    """What the task of `start` runs: the rest of a coroutine already stepped once. Its
    first `send` hands the task what that step waits on; everything after, including a
    cancellation thrown in before the task ever ran, goes to the coroutine itself. A
    coroutine that finished in its first step leaves the task nothing to do."""

    __slots__ = ("coro", "finished", "pending", "started")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro
        self.pending: Any = None
        self.finished = False
        self.started = False

    def send(self, value: Any) -> Any:
        if self.finished:
            raise StopIteration(None)
        if not self.started:
            self.started = True
            return self.pending
        return self.coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self.finished:
            raise StopIteration(None)  # the call is over: a late cancellation has no target
        self.started = True
        if val is None and tb is None:
            return self.coro.throw(typ)
        return self.coro.throw(typ, val, tb)  # pragma: no cover - the legacy signature

    def close(self) -> None:
        if not self.finished:
            self.coro.close()

    def __await__(self) -> Generator[Any, None, Any]:  # pragma: no cover - never awaited
        raise TypeError("_Resume is run by its task, not awaited")


__all__ = ["start"]
