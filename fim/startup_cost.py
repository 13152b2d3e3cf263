"""The one-off start-up a tool call waits for, told apart from the call's own time
(newcomer-53 #13).

The first call that needs the JSON Schema validator loads it (a few hundred ms), and the
first whose arguments a third party's schema must judge starts the worker pool
(`fim.tools.isolate`: one to two seconds on a busy machine). Billed to that call, a
connector call that never sent a request read `← connector (2014 ms)`, and a developer
chases the API. So the engine measures each call (`measuring`, in the call's own task),
the places that start something once count their wait as start-up (`one_off`), and the
`tool_result` event carries the call's own `duration_ms` and, apart, its `startup_ms`.

`clock` is what both read (a test puts a fake one in, no wall-clock assertions).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

clock: Callable[[], float] = time.perf_counter
"""Seconds, monotonic: the clock of tool call durations and start-up waits."""

_WAITED: ContextVar[list[float] | None] = ContextVar("fim_startup_waited", default=None)


def measuring() -> list[float]:
    """Count, from now on in this context (one tool call's task), the start-up it waits
    for: the seconds are summed into the returned list's one item."""
    box = [0.0]
    _WAITED.set(box)
    return box


@contextmanager
def one_off() -> Iterator[None]:
    """The time spent in this block is start-up (a load or a pool's start that happens
    once per process), counted for the call measuring in this context, if any."""
    box = _WAITED.get()
    if box is None:
        yield
        return
    start = clock()
    try:
        yield
    finally:
        box[0] += clock() - start


__all__ = ["clock", "measuring", "one_off"]
