"""What reaches a terminal: text someone else wrote (a model's answer, a tool's output, a
stored run) is shown, never obeyed. One helper per console kind: `printable` for plain
writes, `markup` for a rich console (whose `[...]` markup is a second way to restyle it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with control characters shown as escapes (`\\x1b`), for a terminal: a model's
    answer, a tool's output or a stored run's output is not the terminal's to control.
    Written raw, an escape sequence recoloured, cleared or retitled the screen: text set
    black on black hid the real `Allow ...? [y/N]` of an approval behind a fake one, and
    OSC 52 wrote the clipboard. Newlines and tabs stay; bidirectional overrides, which
    reorder what is shown, are escaped too."""
    if text.isprintable() or not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(lambda m: m.group(0).encode("unicode_escape").decode(), text)


def markup(text: str) -> str:
    """`text` for a rich console: `printable`, and rich's own markup escaped."""
    # deferred: loading rich costs a few ms
    from rich.markup import escape

    return escape(printable(text))


def clipped(text: str, limit: int, middle: bool = False) -> str:
    """`text` on one line, at most `limit` characters: cut at the end, or, for an error
    (`middle`), in the middle, since what to do is usually said last."""
    text = text.replace("\n", " ")
    if len(text) <= limit:
        return text
    if not middle:
        return text[: limit - 1] + "…"
    head = limit // 3
    return text[:head] + " … " + text[len(text) - (limit - head - 3) :]


def rich_console(**options: Any) -> Console:
    """A rich console for fim's views of runs, approvals and reports, which print text
    someone else wrote: besides the markup `markup` escapes, rich turns `:name:` codes
    into emoji (`root:x:0` of a tool's output read `root❌0`, attack-55 F5), so they are off."""
    # deferred: loading rich costs a few ms
    from rich.console import Console

    options.setdefault("emoji", False)
    return Console(**options)
