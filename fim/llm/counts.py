"""A token count as a provider's reply states it, read defensively: a gateway that sends
a negative, non-numeric or absurd count must neither lower a budget's spend nor crash
the run (`fim.llm.wire.parse_usage`)."""

from __future__ import annotations

from typing import Any

MAX_COUNT = 10**12
"""The largest token count read from a reply: anything above is a broken or hostile
endpoint's, and counts as this much (a day's limit is passed, the store can hold it)."""


def count(value: Any) -> int:
    """A token count as the provider sent it: a number (a float rounded down) or a numeric
    string; anything else, negative or not finite, is 0; at most `MAX_COUNT`."""
    if isinstance(value, bool):
        return 0
    try:
        number = float(value) if isinstance(value, str) else value
        counted = int(number) if isinstance(number, int | float) else 0
    except (ValueError, OverflowError):  # "NaN", "inf", "abc"
        return 0
    return min(max(counted, 0), MAX_COUNT)
