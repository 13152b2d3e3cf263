"""The deadline of one MCP request: an idle timeout that progress resets, under a hard cap.

A long tool that keeps reporting progress should not be cut off by the idle timeout, but
a server that reports progress forever must not hold a run forever either, so every call
also has a hard maximum. While the server waits for a human (an elicitation in the
approvals queue), neither clock runs against the call: the wait has its own timeout.

The clock is injectable so tests can move time instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

Clock = Callable[[], float]


class CallDeadline:
    """When a call must be given up: `idle` seconds without a sign of life, or `hard`
    seconds in all (time spent waiting for a human does not count toward either)."""

    def __init__(self, idle: float, hard: float | None = None, clock: Clock = time.monotonic):
        self.idle = idle
        self.hard = max(hard, idle) if hard is not None else None
        self.clock = clock
        now = clock()
        self._last = now
        self._spent = 0.0
        """Active (not paused) seconds before the current stretch began."""
        self._stretch_start = now
        self._paused = 0
        self.changed = asyncio.Event()
        """Set whenever the deadline moved (progress, a pause ending): a waiter re-checks."""

    def touch(self) -> None:
        """A sign of life (the request left, a progress notification): the idle clock restarts."""
        self._last = self.clock()
        self.changed.set()

    def pause(self) -> None:
        """The server waits on us (a human answering an elicitation): stop both clocks."""
        if self._paused == 0:
            self._spent += self.clock() - self._stretch_start
        self._paused += 1
        self.changed.set()

    def resume(self) -> None:
        self._paused = max(0, self._paused - 1)
        if self._paused == 0:
            now = self.clock()
            self._stretch_start = now
            self._last = now  # the human's answer is the latest sign of life
        self.changed.set()

    @property
    def paused(self) -> bool:
        return self._paused > 0

    def remaining(self) -> float | None:
        """Seconds left (<= 0 means expired), None while paused."""
        if self._paused:
            return None
        now = self.clock()
        left = self._last + self.idle - now
        if self.hard is not None:
            left = min(left, self.hard - (self._spent + now - self._stretch_start))
        return left

    def expired_reason(self) -> str:
        """Why it expired, for the model: which of the two limits was hit."""
        if self.hard is not None:
            spent = self._spent + self.clock() - self._stretch_start
            if spent >= self.hard - 1e-9:
                return f"did not finish within its hard limit of {self.hard:g}s"
        return f"no answer or progress within {self.idle:g}s"
