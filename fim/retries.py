"""One retry policy for everything fim retries: model calls, HTTP connector calls and
workflow nodes.

Each caller used to hand-write its own loop, and they drifted (one had jitter, one honoured
Retry-After, one counted attempts from zero). Here a `Backoff` declares the policy —
attempts, first delay, growth, jitter, a cap — and `retry_async` runs it on `tenacity`.
What is worth retrying stays with the caller (`retry_on` for exceptions, `retry_result` for
answers such as an HTTP 5xx), because only the caller knows whether a repeat is safe.

`sleep` is injectable, so tests count the delays instead of waiting for them.
tenacity (~20 ms) is imported only when something is actually retried.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[Any]]
OnRetry = Callable[[int, float, "BaseException | None"], None]
"""Called before each wait with (failed attempt number, seconds to wait, the exception or
None when an answer was retried) — where a caller logs or emits a notice."""


@dataclass(frozen=True)
class Backoff:
    """How often and how patiently to try.

    `attempts` counts every try (1 = no retry). The wait after the n-th failure is
    `first * factor ** (n - 1)`, plus up to `jitter` of it at random (so clients rate-limited
    together do not come back together), at most `cap` seconds. A server's Retry-After wins
    when it asks for longer.
    """

    attempts: int
    first: float
    factor: float = 2.0
    jitter: float = 0.0
    cap: float | None = None

    def delay(self, failed: int, retry_after: float | None = None) -> float:
        """Seconds to wait after attempt number `failed` (1-based) failed."""
        wait = self.first * self.factor ** (failed - 1)
        if self.jitter:
            wait *= 1 + random.random() * self.jitter
        if self.cap is not None:
            wait = min(wait, self.cap)
        return max(wait, retry_after or 0.0)


def parse_retry_after(value: str | None, limit: float = 30.0) -> float | None:
    """Seconds from a Retry-After header (numbers only; HTTP dates are ignored), at most
    `limit` so a hostile or confused server cannot park a run for an hour."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    if seconds is None or seconds != seconds or seconds < 0:  # NaN, negative
        return None
    return min(seconds, limit)


def _never(_: BaseException) -> bool:
    return False


async def retry_async(
    call: Callable[[], Awaitable[T]],
    policy: Backoff,
    *,
    retry_on: Callable[[BaseException], bool] = _never,
    retry_result: Callable[[T], bool] | None = None,
    retry_after: Callable[[BaseException], float | None] | None = None,
    on_retry: OnRetry | None = None,
    sleep: Sleep | None = None,
) -> T:
    """Run `call` up to `policy.attempts` times.

    An exception for which `retry_on` is true is retried; on the last attempt it propagates
    unchanged (callers word their own final error). An answer for which `retry_result` is
    true is retried too, and the last such answer is returned. `retry_after(exc)` reads a
    server's requested wait from the exception. Cancellation is never retried.

    The first attempt runs without tenacity: almost every call succeeds at once, and
    building a tenacity loop cost ~0.1 ms a model call (a quarter of `fim serve`'s retry
    path in a profile). When it has to be retried, tenacity replays its outcome as
    attempt 1, so waits, `on_retry` and the final outcome are exactly tenacity's.
    """
    first_exc: BaseException | None = None
    try:
        first = await call()
    except BaseException as exc:  # classified below: re-raised unless retried
        if isinstance(exc, asyncio.CancelledError) or policy.attempts <= 1 or not retry_on(exc):
            raise
        first_exc = exc
    else:
        if retry_result is None or policy.attempts <= 1 or not retry_result(first):
            return first

    # deferred: loading tenacity costs a few ms, and a first attempt that succeeds never needs it
    import tenacity

    def should_retry(state: tenacity.RetryCallState) -> bool:
        outcome = state.outcome
        if outcome is None:
            return False
        if outcome.failed:
            exc = outcome.exception()
            return exc is not None and not isinstance(exc, asyncio.CancelledError) and retry_on(exc)
        return retry_result is not None and retry_result(outcome.result())

    def wait(state: tenacity.RetryCallState) -> float:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None and outcome.failed else None
        asked = retry_after(exc) if exc is not None and retry_after is not None else None
        return policy.delay(state.attempt_number, asked)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is None:
            return
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None and outcome.failed else None
        seconds = state.next_action.sleep if state.next_action is not None else 0.0
        on_retry(state.attempt_number, seconds, exc)

    def give_up(state: tenacity.RetryCallState) -> Any:
        assert state.outcome is not None
        return state.outcome.result()  # the last answer, or the last exception re-raised

    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(max(1, policy.attempts)),
        wait=wait,
        retry=should_retry,
        before_sleep=before_sleep,
        retry_error_callback=give_up,
        sleep=sleep or asyncio.sleep,
    )

    replayed = False

    async def attempt() -> T:  # tenacity awaits only what it sees is a coroutine function
        nonlocal replayed
        if not replayed:  # attempt 1 already ran above: hand tenacity its outcome
            replayed = True
            if first_exc is not None:
                raise first_exc
            return first
        return await call()

    result: T = await retrying(attempt)
    return result


def retry_sync(
    call: Callable[[], T],
    policy: Backoff,
    *,
    retry_on: Callable[[BaseException], bool],
    sleep: Callable[[float], None] | None = None,
) -> T:
    """`retry_async` for blocking code that runs off the event loop (opening a SQLite file
    another process is creating); the last exception propagates unchanged."""

    # deferred: loading tenacity costs a few ms
    import tenacity

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(1, policy.attempts)),
        wait=lambda state: policy.delay(state.attempt_number),
        retry=tenacity.retry_if_exception(retry_on),
        reraise=True,
        sleep=sleep or time.sleep,
    )
    result: T = retrying(call)
    return result


__all__ = ["Backoff", "OnRetry", "Sleep", "parse_retry_after", "retry_async", "retry_sync"]
