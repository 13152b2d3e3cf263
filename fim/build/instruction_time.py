"""`now`, the time an agent's instructions render with, and how a caller freezes it.

A run renders `now` as the current time in UTC, ISO 8601 text to the second
(`2026-05-17T14:30:00+00:00`). A surface may choose another inside `rendering_time`: `fim
eval` records the time a recording rendered with in the case's cassette and replays with
it (`fim.eval.cassettes.Cassette.now_for`), as VCR-style tools freeze time, so a replayed
request is the recorded one byte for byte. The choice is a context variable, so the run
layers below pass nothing down and never import the eval.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Chooser = Callable[[str], str]
"""Given the current time (as `utc_now` words it), the time to render with."""
_CHOOSER: ContextVar[Chooser | None] = ContextVar("fim_instructions_time", default=None)

NOW_HINT = (
    "`now` is text, not a datetime: the run's start in UTC as ISO 8601, e.g. "
    "2026-05-17T14:30:00+00:00; {{ now[:10] }} is the date, {{ now[11:16] }} the time, and "
    "the datetime tool gives the agent a weekday or other formats"
)
"""What a template that used `now` as a datetime (`now.strftime(...)`, `now.year`) is told."""


class Now(str):
    """The text `now` renders as, known apart from other text: an attribute it lacks is
    worded as `now`'s, with `NOW_HINT` (`fim.build.instructions`)."""

    __slots__ = ()


def utc_now() -> str:
    """The current time as instructions read it: UTC, ISO 8601, to the second."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def instructions_now() -> str:
    """The `now` instructions render with here: the current time, or what the
    `rendering_time` block around this call chose instead."""
    live = utc_now()
    choose = _CHOOSER.get()
    return live if choose is None else choose(live)


@contextmanager
def rendering_time(choose: Chooser) -> Iterator[None]:
    """Within this block (and the tasks it starts), instructions render with
    `choose(current time)` as `now`."""
    token = _CHOOSER.set(choose)
    try:
        yield
    finally:
        _CHOOSER.reset(token)


__all__ = ["NOW_HINT", "Chooser", "Now", "instructions_now", "rendering_time", "utc_now"]
