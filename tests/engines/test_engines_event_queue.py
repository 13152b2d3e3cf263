"""The queue one tool turn's events go through (`fim.engines.tool_turn.EventQueue`): first
in, first out, a waiting reader woken by the next event, and nothing lost when the reader
is cancelled while it waits (what `asyncio.Queue` guaranteed here before)."""

from __future__ import annotations

import asyncio

from fim.engines.tool_turn import EventQueue
from fim.events import Notice


def notice(text: str) -> Notice:
    return Notice(message=text)


async def test_events_come_out_in_the_order_they_went_in() -> None:
    queue = EventQueue()
    for text in ("a", "b", "c"):
        queue.put_nowait(notice(text))
    queue.put_nowait(None)
    got = [await queue.get() for _ in range(4)]
    assert [e.message if e is not None else None for e in got] == ["a", "b", "c", None]


async def test_a_waiting_reader_is_woken_by_the_next_event() -> None:
    queue = EventQueue()
    reader = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not reader.done()
    queue.put_nowait(notice("first"))
    queue.put_nowait(notice("second"))
    first = await reader
    assert first is not None and first.message == "first"
    second = await queue.get()
    assert second is not None and second.message == "second"


async def test_a_reader_cancelled_while_waiting_loses_nothing() -> None:
    queue = EventQueue()
    reader = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    queue.put_nowait(notice("kept"))
    kept = await queue.get()
    assert kept is not None and kept.message == "kept"
