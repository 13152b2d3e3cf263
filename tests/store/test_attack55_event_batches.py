"""A follower of a run (`GET /v1/runs/{id}/events`, `fim.store.live.tail`) reads the run's
stored events in batches bounded by size, not by a count: a batch never holds more than
`BATCH_BYTES` of stored event JSON (an event larger than that comes alone), and the
batches together are every event, in order, nothing twice. Before, each follower loaded
1,000 events at once, 4 MB of 4 KB tokens, for as long as its client kept it open
(attack-55 F1: 300 followers that never read took a server to 4.6 GB)."""

from __future__ import annotations

from typing import Any

import pytest

from fim.store import Store, live
from fim.store.event_batches import BATCH_BYTES, stored_batch
from fim.store.live import EventLog, read_batch, read_events, tail
from fim.store.schema import json_text

CHUNK = "x" * 4096
"""A 4 KB token, as a model streaming a long answer writes them."""


def size(event: dict[str, Any]) -> int:
    """The event's stored JSON, in bytes (the JSON columns' serialiser)."""
    return len(json_text(event).encode())


async def stored_run(store: Store, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's events as stored (its tokens masked as a stream may be cut elsewhere)."""
    log = EventLog(store, "r", "agent", "talker", record=False)  # written to the table
    for event in events:
        log.add(event)
    await log.close()
    await store.put_run("r", "agent", "talker", "ok", {})
    return [event for _, event in await read_events(store, "r", limit=100_000)]


def answer(tokens: int) -> list[dict[str, Any]]:
    started = [{"type": "run_started", "run_id": "r", "agent": "talker"}]
    said = [{"type": "token", "run_id": "r", "text": f"{i:04d}{CHUNK}"} for i in range(tokens)]
    return [*started, *said, {"type": "run_finished", "run_id": "r", "output": "é" * 3000}]


async def test_no_batch_holds_more_than_the_bound_and_together_they_are_the_run(store_url: str):
    store = Store(store_url)
    events = await stored_run(store, answer(950))  # ~3.8 MB: the answer of the attack
    assert len(events) >= 952

    read: list[tuple[int, dict[str, Any]]] = []
    batches = 0
    after, more = 0, True
    while more:
        batch, more = await read_batch(store, "r", after, max_bytes=BATCH_BYTES)
        assert batch, "a batch that says more follows is never empty"
        assert sum(size(event) for _, event in batch) <= BATCH_BYTES
        read += batch
        after = batch[-1][0]
        batches += 1
    assert [event for _, event in read] == events
    assert [seq for seq, _ in read] == list(range(1, len(events) + 1))
    assert batches >= sum(size(e) for e in events) // BATCH_BYTES  # ~15, not one of 1,000

    small, more = await read_batch(store, "r", max_bytes=6000)
    assert [seq for seq, _ in small] == [1, 2] and more  # run_started and one token fit
    assert sum(size(event) for _, event in small) <= 6000
    # without a bound, a count: what `GET /v1/runs/{id}` and `fim runs show` read
    assert len(await read_events(store, "r")) == len(events)  # fewer than 1,000
    assert len(await read_events(store, "r", limit=10)) == 10
    store.close()


async def test_an_event_larger_than_the_bound_comes_alone_and_the_tail_goes_on(
    store_url: str, monkeypatch: pytest.MonkeyPatch
):
    store = Store(store_url)
    huge = {"type": "tool_result", "run_id": "r", "content": "y" * (BATCH_BYTES + 1)}
    events = await stored_run(store, [*answer(70)[:-1], huge, *answer(70)[1:]])

    after = events.index(huge)  # its seq is after + 1
    alone, more = await read_batch(store, "r", after, max_bytes=BATCH_BYTES)
    assert [event for _, event in alone] == [huge] and more
    before, more = await read_batch(store, "r", max_bytes=BATCH_BYTES)
    assert more and huge not in [event for _, event in before]
    assert [event for _, event in before] == events[: len(before)]

    held: list[int] = []  # the stored JSON of each batch the tail read

    async def spied(*args: Any) -> Any:
        batch, more = await stored_batch(*args)
        held.append(sum(size(event) for _, event in batch))
        return batch, more

    monkeypatch.setattr(live, "stored_batch", spied)
    followed = [(seq, event) async for seq, event in tail(store, "r")]
    assert [event for _, event in followed] == events  # every batch, to the last event
    assert len(held) > 2 and held.count(size(huge)) == 1
    assert all(each <= BATCH_BYTES for each in held if each != size(huge))
    assert [seq for seq, _ in followed] == list(range(1, len(events) + 1))
    store.close()


async def test_a_run_still_in_memory_is_read_by_count_and_says_when_more_is_there(
    tmp_path: Any,
):
    """SQLite, a run going in this process: its events are held already (the batch refers
    to them), so only the count applies, and `more` still tells the tail to read on."""
    store = Store(f"sqlite:///{tmp_path}/state.db")
    log = EventLog(store, "m", "agent", "talker")
    for i in range(5):
        log.add({"type": "llm_call", "run_id": "m", "n": i})
    first, more = await read_batch(store, "m", limit=3)
    assert [seq for seq, _ in first] == [1, 2, 3] and more
    rest, more = await read_batch(store, "m", 3, limit=3)
    assert [seq for seq, _ in rest] == [4, 5] and not more
    await log.close()
    store.close()
