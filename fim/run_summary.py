"""What a run's record says about it at a glance, computed from its events when it ends.

A run whose tools failed or whose hooks blocked a call still ends `ok`: the model read the
error and answered. In a list of twenty `helper · ok` runs the bad one could not be found
(newcomer-53 #7), so every agent run's record carries, beside its status:

- `tool_errors`: tool results that were errors (a raise, bad arguments, a connector that
  could not be reached), not counting the calls a hook blocked;
- `hook_blocks`: hook decisions that blocked a call (or its result);
- `input`: the first line of what the run was asked, masked and cut at `INPUT_CHARS`.

`GET /v1/runs`, `fim runs list` and the dev page's Runs list show them, and filter on
`has_errors` (either count above zero).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fim.masking import known

INPUT_CHARS = 80
"""The most characters of a run's input a listing shows (an ellipsis ends a longer one)."""


def first_line(text: str, limit: int = INPUT_CHARS) -> str:
    """The first line of `text` that is not blank, masked (`fim.masking.known`) before it
    is cut, so a cut never leaves the start of a secret, and cut at `limit` characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    line = known().text(line)
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def run_summary(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """`tool_errors`, `hook_blocks` and `input` of the run whose events (as JSON, tokens
    left out or not) are `events`; a delegated agent's events count toward its caller."""
    blocked: set[Any] = set()
    errors: list[Any] = []
    blocks = 0
    started: dict[str, Any] | None = None
    for event in events:
        kind = event.get("type")
        if kind == "hook" and event.get("decision") == "block":
            blocks += 1
            blocked.add(event.get("call_id"))
        elif kind == "tool_result" and event.get("is_error"):
            errors.append(event.get("call_id"))
        elif kind == "run_started" and started is None:
            started = event
    summary: dict[str, Any] = {
        # a blocked call's result is an error too: counted once, as the block
        "tool_errors": sum(1 for call in errors if call is None or call not in blocked),
        "hook_blocks": blocks,
    }
    if started is not None:
        summary["input"] = first_line(str(started.get("input") or ""))
    return summary


def has_errors(data: dict[str, Any]) -> bool:
    """Whether a run record's data (`run_summary` in it) counts a tool error or a block."""
    return bool(data.get("tool_errors") or data.get("hook_blocks"))


__all__ = ["INPUT_CHARS", "first_line", "has_errors", "run_summary"]
