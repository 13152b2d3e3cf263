"""One sliding-window rule for every "at most N in T seconds" fim enforces.

The `rate_limit` hook (tool calls per agent and tool), `server.key_limits` (runs a key
starts per minute, `fim.server.limits`) and MCP sampling (requests a server makes per
minute, `fim.mcp.sampling`) count the same way: the times of the events still
inside the window, oldest first, on a monotonic clock the caller passes in (tests slide
it without waiting).
"""

from __future__ import annotations

from collections import deque


def admit(times: deque[float], limit: int, window: float, now: float) -> float | None:
    """Count one event at `now` in `times` unless `limit` are inside the window already:
    None when it is counted, else the seconds until the oldest one leaves the window."""
    while times and now - times[0] >= window:
        times.popleft()
    if len(times) >= limit:
        return window - (now - times[0])
    times.append(now)
    return None


__all__ = ["admit"]
