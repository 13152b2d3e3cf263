"""Attack-40 (/work/notes/attack-40.md).

- #2 A call to an endpoint that reports no usage, cancelled while its answer is counted on
  a thread, counts its prompt and its answer by length, as a cut call does: it counted as
  nothing (a budget bypass for self-hosted servers and gateways).

(#1, one tenant's answers stalling another's `scope: key` connection, is in
tests/test_attack36_pacing.py.)
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import fim.run.limits as limits
from fim.config.schema.spend import Budget
from fim.run.spend import MeteredModel
from fim.run.tree import RunSpend, spending
from fim.types import Message, ModelResponse, Usage


class Unreported:
    """An endpoint that answers 100,000 characters and reports no usage."""

    name = "unreported"
    settings = None

    async def complete(self, messages: Any, tools: Any = None, **options: Any) -> ModelResponse:
        return ModelResponse(
            message=Message(role="assistant", content="x" * 100_000), usage=Usage()
        )


async def test_an_answer_cancelled_while_it_is_counted_still_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counting, go_on = threading.Event(), threading.Event()
    real = limits.count_message

    def slow(*args: Any) -> int:
        counting.set()
        go_on.wait(30)
        return real(*args)

    monkeypatch.setattr(limits, "count_message", slow)
    node = RunSpend("a", ())
    model = MeteredModel(
        Unreported(), [("project", Budget(max_tokens=10**9))], agent="a", spend=node
    )
    with spending(node):
        call = asyncio.create_task(model.complete([Message(role="user", content="hi")]))
        await asyncio.to_thread(counting.wait, 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    go_on.set()
    assert node.unreported is not None
    assert node.unreported.completion_tokens == 100_000 // 3 and node.unreported.prompt_tokens > 0


async def test_abandoned_threads_of_the_projects_code_are_capped_per_process_and_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#3: a sync project function past its timeout keeps its thread (a thread cannot be
    killed), and each timed-out call left one more. At `MAX_LIVE` alive (half of them for
    one API key) a new call is refused until one ends."""
    from fim import threads
    from fim.locks import current_owner

    monkeypatch.setattr(threads, "MAX_LIVE", 4)
    release = threading.Event()
    started = 0

    def stuck() -> str:
        nonlocal started
        started += 1
        release.wait(30)
        return "done"

    async def abandoned() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(threads.own_thread(stuck), 0.01)

    token = current_owner.set("tenant-a")
    try:
        await abandoned()
        await abandoned()
        with pytest.raises(threads.TooBusy, match="2 calls of the project's own code"):
            await threads.own_thread(stuck)  # the key's half is taken
    finally:
        current_owner.reset(token)
    await abandoned()  # another key (none) still has room, up to the process's cap
    await abandoned()
    with pytest.raises(threads.TooBusy, match="4 calls"):
        await threads.own_thread(stuck)
    assert started == 4
    release.set()
    while threads._live:  # the abandoned threads end, and give their places back
        await asyncio.sleep(0.01)
    assert await threads.own_thread(lambda: "again") == "again"
