"""A case's latency: what the `latency_ms` check and the reports read.

A case's latency is its own time, from when it has its slot (`fim eval --concurrency`)
to its end, less the time its model calls waited for a call slot: at concurrency 8, ~95 ms
calls were reported as ~830 ms, the queue and fim's warm-up counted (newcomer9 #3). The
runner warms up (imports the engines) before the first case's clock starts.

A replayed case took fim's time, not a model's: its latency is the sum of the durations
the cassette recorded for the model calls it replays (`--record` stores each call's own
duration, its slot wait excluded). A cassette recorded before that holds none: then a
`latency_ms` check is reported not checked (replayed), never passed on fim's overhead.
A case whose models are all scripted calls no model, so its own time is what there is.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]
"""Seconds, monotonic (`time.perf_counter`); tests hand in their own."""


class CaseClock:
    """One case run's clock: started when the case has its slot; its model calls add the
    time they waited for a call slot (`queued`) and, in replay, the duration each reply
    replayed was recorded with (`replayed`)."""

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock = clock
        self.started = clock()
        self.queued = 0.0
        """Seconds the case's model calls waited for a call slot (not the model's time)."""
        self.replayed: list[float | None] = []
        """Per reply replayed from the cassette: its recorded duration in ms, or None (a
        cassette recorded before durations were stored)."""
        self.stopped: float | None = None

    def waited(self, seconds: float) -> None:
        self.queued += max(0.0, seconds)

    def replay(self, duration_ms: float | None) -> None:
        self.replayed.append(duration_ms)

    def stop(self) -> None:
        """The case's target finished: its judges' calls, after, are no part of it."""
        if self.stopped is None:
            self.stopped = self.clock()

    @property
    def elapsed_ms(self) -> float:
        """The case's own time so far (until `stop`), its slot waits left out."""
        end = self.clock() if self.stopped is None else self.stopped
        return max(0.0, end - self.started - self.queued) * 1000

    @property
    def recorded_ms(self) -> float | None:
        """The latency the cassette recorded for the replies replayed (their sum), or None
        when one of them has none or nothing was replayed."""
        if not self.replayed or any(d is None for d in self.replayed):
            return None
        return float(sum(d for d in self.replayed if d is not None))


REPLAYED_UNKNOWN = (
    "not checked (replayed: the cassette holds no recorded latency; "
    "`fim eval --record` stores it, `--live` measures it)"
)
"""The `latency_ms` check of a replayed case whose cassette recorded no durations."""


def latency_line(limit: float, took_ms: float, replayed: bool) -> str:
    """A `latency_ms` check's message, saying which latency it compared."""
    whose = "the recorded model calls took" if replayed else "took"
    return f"expected <= {limit:g} ms, {whose} {took_ms:.0f} ms"
