"""A day's budget counts each call once and against the right run: the check after a call
judges what was spent up to its answer, not the spend of calls admitted after it.

Ten parallel runs under a 3,000-token day once ended with one `ok` in CI where two calls
fit (the third, capped to the room left, passes the day by how far its prompt estimate was
off). No spend was counted twice: a call gave its room back before its check read the
store, and when that read was slow (the CI machine under load) the waiting runs' calls
were admitted into the room, answered, and made the day 3,012 tokens, which the check
then counted against the run whose own call spent 100."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

import fim.store.usage
from fim.run import in_flight
from fim.store import get_store
from fim.store.usage import utc_day
from fim.testing.runs import services_for
from fim.types import Message, ModelResponse, Usage
from tests.run.test_budgets_in_flight import final_status, project, until


class FirstGated:
    """The first call answers 100 tokens when the test lets it; later calls answer at once
    with as many completion tokens as their `max_tokens` allows (20 prompt tokens, where
    fim estimates a few less), as a provider does."""

    name = "first-gated"

    def __init__(self) -> None:
        self.caps: list[int | None] = []
        self.gate = asyncio.Event()

    async def complete(
        self, messages: list[Message], tools: Any = None, **options: Any
    ) -> ModelResponse:
        self.caps.append(options.get("max_tokens"))
        completion = 80
        if len(self.caps) == 1:
            await self.gate.wait()
        else:
            completion = options.get("max_tokens") or 1000
        return ModelResponse(
            message=Message(role="assistant", content="done"),
            usage=Usage(prompt_tokens=20, completion_tokens=completion),
        )

    def stream(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not streamed
        raise NotImplementedError


def test_a_call_admitted_while_a_check_reads_the_store_is_not_counted_against_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run's call answers 100 tokens of a 3,000-token day, and its check reads
    the store slowly: until that read is done, the call keeps holding its room, so the
    waiting run's call is not admitted meanwhile and the first run ends `ok`. Before, the
    room was given back first; the second run's call went, answered the 2,912 tokens it was
    capped at, and the first run's check, returning after it, failed its run with "3012
    tokens spent"."""
    snapshot = project(
        tmp_path,
        "budget: {max_tokens_per_day: 3000}\n",
        agent="model: scripted:s.yaml\n",
        script="- text: unused\n",
    )
    model = FirstGated()
    slow = asyncio.Event()  # set: the next daily read waits for `go`
    reading, go = asyncio.Event(), asyncio.Event()
    read = fim.store.usage.spent

    async def slow_read(*args: Any, **kwargs: Any) -> Usage:
        if slow.is_set():
            slow.clear()
            reading.set()
            await go.wait()
        return await read(*args, **kwargs)

    monkeypatch.setattr(fim.store.usage, "spent", slow_read)

    async def go_runs() -> list[str]:
        services = services_for(snapshot)
        try:
            first = asyncio.create_task(final_status(snapshot, services, model))
            await until(lambda: len(model.caps) == 1)
            second = asyncio.create_task(final_status(snapshot, services, model))
            day = in_flight.pool(get_store(services), "day", utc_day(time.time()), None, None)
            await until(lambda: day.waiting == 1)
            slow.set()  # the first call's check is the next read of the day
            model.gate.set()
            await reading.wait()
            # the second call goes as far as it can while the check reads: it answers, or
            # it waits for the room the first call still holds
            await until(
                lambda: (day.calls == 1 and day.waiting == 1) or day.usage.total_tokens > 3000
            )
            go.set()
            return [await first, await second]
        finally:
            await services.aclose()

    statuses = asyncio.run(go_runs())
    assert statuses[0] == "ok", statuses
    # the second call went after the first's check, capped to what the day had left; it
    # passed the day by its prompt's estimate (its own spend: its run stops)
    assert len(model.caps) == 2
    second_cap = model.caps[1]
    assert second_cap is not None and 2800 < second_cap < 3000 - 100
