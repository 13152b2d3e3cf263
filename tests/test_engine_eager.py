"""`fim.engines.eager.start`: a tool call's task with its first step taken at once. The
step runs as the new task (so deadlines and cancellation reach the call, not the engine),
in the task's own context; a call that suspends continues in its task."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from fim.engines.eager import start

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="outer")


def test_a_call_that_does_not_suspend_is_done_at_once() -> None:
    async def main() -> None:
        outer = asyncio.current_task()
        seen: list[object] = []

        async def call() -> str:
            seen.append(asyncio.current_task())
            VAR.set("call")
            return "42"

        future = start(call())
        assert future.done() and future.result() == "42"
        assert seen[0] is not outer and seen[0] is not None  # ran as its own task
        assert asyncio.current_task() is outer
        assert VAR.get() == "outer"  # the call's context is its own

    asyncio.run(main())


def test_a_failure_in_the_first_step_is_the_future_s() -> None:
    async def main() -> None:
        async def call() -> str:
            raise ValueError("bad")

        future = start(call())
        with pytest.raises(ValueError, match="bad"):
            future.result()

    asyncio.run(main())


def test_a_deadline_entered_in_the_first_step_cancels_the_call_not_the_caller() -> None:
    async def main() -> None:
        outcome: list[str] = []

        async def call() -> None:
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.Event().wait()  # never set: only the deadline ends it
            except TimeoutError:
                outcome.append("timed out")
            assert VAR.get() == "call"

        VAR.set("call")
        future = start(call())
        VAR.set("outer")
        assert not future.done()
        await future
        assert outcome == ["timed out"]
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_cancelling_before_the_task_runs_reaches_the_call() -> None:
    async def main() -> None:
        cleaned: list[str] = []

        async def call() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cleaned.append("cancelled")
                raise

        task = start(call())
        task.cancel()  # before its task ever ran
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == ["cancelled"]

    asyncio.run(main())


def test_a_suspending_call_returns_its_value() -> None:
    async def main() -> None:
        async def call() -> int:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return 7

        assert await start(call()) == 7

    asyncio.run(main())
