"""`fim worker`'s seconds flags, checked before anything starts: every problem at once,
in one line, and never a value that makes a worker look dead to the others."""

from __future__ import annotations

import math

from fim.errors import RunError

HEARTBEAT_RANGE = (0.1, 300.0)
"""`--heartbeat` seconds: a shorter beat is a write to PostgreSQL many times a second, a
longer one makes a dead worker's jobs wait long for nothing."""

SKEW_WAIT_MAX = 86400.0
"""The longest `--skew-wait` (a day): a job waiting longer holds a worker slot for nothing."""


def _seconds(flag: str, value: float, low: float, high: float, low_open: bool = False) -> str:
    """The problem with a flag's seconds, or "": click's FLOAT takes `nan` and `inf`, and
    every comparison with NaN is False, so the range is checked as "inside", not "outside"."""
    inside = low < value <= high if low_open else low <= value <= high
    if math.isfinite(value) and inside:
        return ""
    above = "more than" if low_open else "from"
    return f"{flag}: {value:g} is not a number of seconds {above} {low:g} up to {high:g}"


def check_stalled(
    stalled_after: float, heartbeat: float, skew_wait: float = 60.0, store_retry: float = 120.0
) -> None:
    """Refuse seconds that are not finite or out of range (`--heartbeat nan` never beats:
    its live jobs would be re-queued and run twice; `--stalled-after 1e11` would keep every
    worker from pruning dead ones), and a stalled bound shorter than three heartbeats: a
    worker would look dead to the others between two beats, and its live jobs would run
    twice. Every problem at once."""
    # deferred: fim.workflows loads the config schema (hundreds of ms); `fim --help` must not
    from fim.workflows.queue_rows import STALLED_AFTER_MAX

    problems = [
        _seconds("--heartbeat", heartbeat, *HEARTBEAT_RANGE),
        _seconds("--stalled-after", stalled_after, 0.0, STALLED_AFTER_MAX, low_open=True),
        _seconds("--skew-wait", skew_wait, 0.0, SKEW_WAIT_MAX),
        _seconds("--store-retry-timeout", store_retry, 0.0, SKEW_WAIT_MAX),
    ]
    if any(problems):
        raise RunError(
            "; ".join(p for p in problems if p),
            hint="the defaults are --heartbeat 10 --stalled-after 30 --skew-wait 60; "
            f"--stalled-after is 3 heartbeats or more, up to {STALLED_AFTER_MAX:g} (a day)",
        )
    if stalled_after < 3 * heartbeat:
        raise RunError(
            f"--stalled-after {stalled_after:g} is less than 3 heartbeats "
            f"(--heartbeat {heartbeat:g})",
            hint=f"use --stalled-after {3 * heartbeat:g} or more, or a shorter --heartbeat",
        )
