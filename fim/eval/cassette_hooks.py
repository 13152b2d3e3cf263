"""A cassette's hooks mode (newcomer55 #2): each recording says whether its case ran with
hooks (`"hooks": "on"|"off"`) and which tools a hook blocked then (`"blocked"`), so a replay
in the other mode that misses names the real cause instead of advising `--record` (which,
without hooks, would run for real the very call the hooks had blocked).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cassettes name the hooks mode in their misses: no import at run time
    from fim.eval.cassettes import Cassette
    from fim.eval.trajectory import Call


def note_blocked(cassette: Cassette, calls: Iterable[Call]) -> None:
    """Keep, when recording, the tools a PreToolUse hook blocked in this run (masked)."""
    if cassette.mode != "record":
        return
    for call in calls:
        if call.blocked_by is not None:
            cassette.blocked.add(cassette.masker.text(call.event.target or call.event.name))


def hooks_cause(cassette: Cassette, tool: str | None = None) -> tuple[str, str] | None:
    """(what differs, hint) when the recording was made in the other hooks mode than this
    run's, or None (the same mode, or a cassette from before fim recorded it)."""
    was = cassette.hooks
    if was is None or (was == "on") == cassette.hooks_now:
        return None
    if was == "off":
        return (
            "recorded with hooks bypassed; this run has hooks on (a hook's decision changed "
            "what the model saw)",
            "run it as recorded (`fim eval --without-hooks`, or `hooks: off` in the suite), "
            "or record it with its hooks: `fim eval --record --with-hooks`",
        )
    blocked = sorted(cassette.blocked)
    if tool is not None and tool in cassette.blocked:
        blocked = [tool]
    then = f": {', '.join(blocked)} was blocked then" if blocked else ""
    return (
        f"recorded with hooks on{then}; this run bypasses hooks",
        "replay it with hooks as recorded (`hooks: on` in the suite, or `fim eval "
        "--with-hooks`); `fim eval --record` without hooks would run for real what the "
        "hooks blocked",
    )


def with_cause(
    cassette: Cassette, text: str, hint: str, tool: str | None = None
) -> tuple[str, str]:
    """A miss's (message, hint), the hooks mode named first when it differs."""
    cause = hooks_cause(cassette, tool)
    if cause is None:
        return text, hint
    detail = text.removeprefix("cassette miss: ")
    return f"cassette miss: {cassette.path.name} was {cause[0]} ({detail})", cause[1]


__all__ = ["hooks_cause", "note_blocked", "with_cause"]
