"""The project's synchronous code (Python tools, `python:` eval assertions) runs in a
thread of its own (`fim.threads.own_thread`): a call past its deadline is abandoned
without holding a thread of the loop's default executor, which fim's own off-loop work
shares, nor the process at its exit."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from fim.threads import own_thread

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


async def test_stuck_calls_past_their_deadline_leave_the_default_executor_free() -> None:
    release = threading.Event()
    try:
        for _ in range(12):  # twice the default executor's threads on two cores
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(own_thread(release.wait), 0.01)
        # fim's own off-loop work still gets a thread at once
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 30) == "free"
        stuck = [t for t in threading.enumerate() if t.name == "fim-project-code"]
        assert len(stuck) == 12 and all(t.daemon for t in stuck)  # not joined at exit
    finally:
        release.set()


async def test_it_runs_in_the_callers_context_and_its_exits_are_its_failures() -> None:
    WHO.set("caller")
    assert await own_thread(WHO.get) == "caller"

    def leaves() -> None:
        raise SystemExit(3)

    with pytest.raises(RuntimeError, match="SystemExit: 3"):
        await own_thread(leaves)
    with pytest.raises(ValueError, match="bad"):
        await own_thread(int, "bad")
