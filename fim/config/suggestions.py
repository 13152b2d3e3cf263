"""The did-you-mean of every "unknown X" problem (`suggest`): the closest valid name, or
the valid names when nothing is close."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

_NOT = re.compile(r"(?:^|[_-])not(?:[_-]|\Z)", re.I)
"""A name that says the opposite: `not_contains`, `not-icontains`, `tool_not_called`."""


def negated(word: str) -> bool:
    """Whether `word` names the opposite of something (`not_regex`, `tool_not_called`)."""
    return _NOT.search(word) is not None


def suggest(word: str, candidates: Iterable[str], what: str = "") -> str | None:
    """A did-you-mean hint, or the valid choices when nothing is close.

    Only a name of the same sense is ever meant: `not_regex` is one letter from nothing
    fim has, and "did you mean 'regex'?" would turn a check that the output lacks a match
    into one that it has one (as `not-icontains` into `not_contains`, which cares about
    case, is at least the same sense). A negated word is offered only negated names, a
    plain one only plain names; the valid choices listed are all of them."""
    choices = sorted({c for c in candidates if c})
    sense = negated(word)
    alike = [c for c in choices if negated(c) == sense]
    close = difflib.get_close_matches(word, alike, n=1, cutoff=0.6)
    if not close and len(word) >= 3:
        close = [c for c in alike if c.startswith(word) or word.startswith(c)][:1]
    if close:
        return f"did you mean '{close[0]}'?"
    if not choices:
        return f"no {what} declared" if what else None
    shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
    return f"valid {what}: {shown}" if what else f"valid: {shown}"


__all__ = ["negated", "suggest"]
