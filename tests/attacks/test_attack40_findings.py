"""Attack-40 (/work/notes/attack-40.md).

- #2 A call to an endpoint that reports no usage, cancelled while its answer is counted on
  a thread, counts its prompt and its answer by length, as a cut call does: it counted as
  nothing (a budget bypass for self-hosted servers and gateways).

(#1, one tenant's answers stalling another's `scope: key` connection, is in
tests/attacks/test_attack36_pacing.py.)
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
    killed), and each timed-out call left one more. At `MAX_LIVE` alive, or half of them
    one API key's, a new call waits for a place (within its caller's timeout) instead of
    starting another; a key holding none still starts one, so other keys' stuck calls never
    shut it out (attack-41 #1)."""
    from fim import threads
    from fim.locks import current_owner

    monkeypatch.setattr(threads, "MAX_LIVE", 4)
    release = threading.Event()
    started: list[str] = []

    def stuck() -> str:
        started.append(current_owner.get())
        release.wait(30)
        return "done"

    async def abandoned(owner: str) -> None:
        token = current_owner.set(owner)
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(threads.own_thread(stuck), 0.05)
        finally:
            current_owner.reset(token)

    for owner in ("tenant-a", "tenant-a", "tenant-a", "", ""):
        await abandoned(owner)
    assert started == ["tenant-a", "tenant-a", "", ""]  # a's third waited: half is its own
    await abandoned("tenant-b")  # the process's four are taken, but b holds none
    await abandoned("tenant-b")  # its second waits
    assert started[-1] == "tenant-b" and len(started) == 5
    release.set()
    while threads._live:  # the abandoned threads end, and give their places back
        await asyncio.sleep(0.01)
    assert await threads.own_thread(lambda: "again") == "again"


def test_a_tickets_room_is_given_back_once() -> None:
    """Freed twice, later calls could spend past a limit (attack-41: nothing did, but
    nothing stopped a future path from it)."""
    from fim.run.in_flight import Pool
    from fim.run.limits import Ticket

    pool = Pool()
    pool.hold(100, 0.0)
    ticket = Ticket(10, [pool], 100, 0.0, None)
    ticket.release()
    ticket.release()
    assert pool.held_tokens == 0
