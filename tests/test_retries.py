"""The one retry policy (`fim.retries`) and the callers built on it: delays are recorded by an
injected sleep, never waited for."""

from __future__ import annotations

import asyncio

import pytest

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm.base import Transient, with_retries
from fim.retries import Backoff, parse_retry_after, retry_async, retry_sync


class Waits:
    """An injected sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Status(Exception):
    def __init__(self, status: int, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


def http_like(statuses: list[int], retry_after: float | None = None):
    """A call answering the given statuses in order (200 returns "ok")."""
    calls: list[int] = []

    async def call() -> str:
        status = statuses[len(calls)]
        calls.append(status)
        if status != 200:
            raise Status(status, retry_after)
        return "ok"

    return call, calls


def transient(exc: BaseException) -> bool:
    return isinstance(exc, Status) and (exc.status == 429 or exc.status >= 500)


async def test_429_is_retried_and_retry_after_wins_over_a_shorter_backoff():
    call, calls = http_like([429, 429, 200], retry_after=3.0)
    waits = Waits()
    result = await retry_async(
        call,
        Backoff(5, 0.5),
        retry_on=transient,
        retry_after=lambda exc: getattr(exc, "retry_after", None),
        sleep=waits,
    )
    assert result == "ok" and calls == [429, 429, 200]
    assert waits.delays == [3.0, 3.0]


async def test_backoff_doubles_and_gives_up_after_n_attempts_with_the_last_error():
    call, calls = http_like([503] * 10)
    waits = Waits()
    seen: list[tuple[int, float]] = []
    with pytest.raises(Status) as caught:
        await retry_async(
            call,
            Backoff(4, 0.1),
            retry_on=transient,
            on_retry=lambda n, delay, exc: seen.append((n, delay)),
            sleep=waits,
        )
    assert caught.value.status == 503 and len(calls) == 4
    assert waits.delays == pytest.approx([0.1, 0.2, 0.4])
    assert seen == [(1, waits.delays[0]), (2, waits.delays[1]), (3, waits.delays[2])]


async def test_a_400_is_never_retried():
    call, calls = http_like([400, 200])
    waits = Waits()
    with pytest.raises(Status):
        await retry_async(call, Backoff(5, 0.1), retry_on=transient, sleep=waits)
    assert calls == [400] and waits.delays == []


async def test_a_retried_answer_returns_the_last_one_when_attempts_run_out():
    answers = iter([502, 500, 504])
    waits = Waits()

    async def call() -> int:
        return next(answers)

    last = await retry_async(call, Backoff(3, 1.0), retry_result=lambda s: s >= 500, sleep=waits)
    assert last == 504 and waits.delays == [1.0, 2.0]


async def test_cancellation_is_never_retried():
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await retry_async(call, Backoff(3, 0.0), retry_on=lambda exc: True, sleep=Waits())
    assert calls == 1


def test_delay_cap_jitter_and_retry_after_parsing():
    assert Backoff(9, 1.0, cap=5.0).delay(10) == 5.0
    jittered = [Backoff(3, 1.0, jitter=0.25).delay(2) for _ in range(50)]
    assert all(2.0 <= d <= 2.5 for d in jittered)
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("3600") == 30.0  # a hostile server cannot park a run for an hour
    for bad in (None, "", "soon", "nan", "-1", "Wed, 21 Oct 2015 07:28:00 GMT"):
        assert parse_retry_after(bad) is None


def test_retry_sync_retries_only_what_it_is_told():
    tries: list[int] = []
    slept: list[float] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise OSError("database is locked")
        return "wal"

    locked = lambda exc: "locked" in str(exc)  # noqa: E731
    policy = Backoff(5, 0.05, factor=1.0)
    assert retry_sync(flaky, policy, retry_on=locked, sleep=slept.append) == "wal"
    assert slept == [0.05, 0.05]
    with pytest.raises(OSError, match="disk full"):
        retry_sync(lambda: (_ for _ in ()).throw(OSError("disk full")), policy, retry_on=locked)


async def test_model_calls_retry_transient_failures_then_name_the_count():
    settings = ModelSettings(model="openai/x", max_retries=2, extra={"retry_backoff": 0.5})
    waits = Waits()
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise Transient("HTTP 429 rate limited", "slow down sk-secret-1234", retry_after=7.0)

    with pytest.raises(RunError) as caught:
        await with_retries(settings, attempt, "sk-secret-1234", sleep=waits)
    assert calls == 3 and waits.delays == [7.0, 7.0]
    assert caught.value.message.startswith("openai/x: HTTP 429 rate limited after 3 attempts")
    assert "sk-secret-1234" not in caught.value.message


async def test_model_calls_do_not_retry_a_final_error():
    settings = ModelSettings(model="openai/x", max_retries=3)
    waits = Waits()

    async def attempt() -> str:
        raise RunError("openai/x: model endpoint returned HTTP 400: bad")

    with pytest.raises(RunError, match="HTTP 400"):
        await with_retries(settings, attempt, sleep=waits)
    assert waits.delays == []
