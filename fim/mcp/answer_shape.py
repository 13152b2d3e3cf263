"""How much one JSON answer of an MCP server may hold, counted without parsing it.

Bytes are not the whole cost: the SDK parses and validates an answer on the event loop,
at a cost that grows with what it holds. 500,000 empty text blocks (15 MB) held the loop
5 s, and an answer nested past the parser's depth limit was dropped unanswered, its call
waiting out its timeout. So before the SDK sees an answer, `shape_problem` counts its
values, objects and levels with C-level scans of the bytes, and one past `MAX_VALUES`,
`MAX_OBJECTS` or `MAX_DEPTH` is refused like one past the byte cap. Kept apart from the
readers that apply it (`fim.mcp.capped`: HTTP bodies, events, stdio lines), which decide
where one message ends; this module decides whether it may be parsed.
"""

from __future__ import annotations

import itertools
import re

MAX_OBJECTS = 50_000
"""Objects and arrays one answer may hold: validating 500,000 text blocks took the SDK
2.5 s of the event loop, 50,000 a tenth of that (and a `tools/list` of 2,000 tools, the
most fim offers, with 20 objects in each schema, still fits)."""
MAX_VALUES = 1_000_000
"""Keys and values one answer may hold (strings, numbers): parsing 5 million empty
strings took the SDK 0.5 s of the loop."""
MAX_DEPTH = 128
"""Levels one answer may nest. The SDK's parser gives up at 200 and drops the message
(logging a traceback), so the request it answered waited out its whole timeout; what is
refused here is refused at once, and below the parser's limit with room to spare."""
MAX_EVENT_LINES = 50_000
"""Lines of one event of an event stream: an event reaches the SDK whole
(`fim.mcp.capped._Capped`), and its reader handles each line in Python."""

_DATA = re.compile(rb"^data: ?(.*)$", re.MULTILINE)
"""An event's data lines (the JSON the SDK parses), in an event whose line ends are LF."""
_BRACKETS = bytes.maketrans(b"[]", b"{}")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"{}[]"))


def too_many(limit: int, what: str) -> str:
    """Why an answer is refused for holding more than `limit` of `what`."""
    return f"the server's answer holds more than {limit:,} {what}, the most fim reads"


def too_deep(limit: int) -> str:
    """Why an answer is refused for nesting deeper than `limit` levels."""
    return f"the server's answer is nested deeper than {limit} levels, the most fim reads"


def values(text: bytes) -> int:
    """About how many values `text` holds, counting what strings hold too (so at least what
    is outside them, whichever quotes open a string): a few `bytes.count`, no copy."""
    return text.count(b"{") + text.count(b"[") + text.count(b",") + text.count(b'"') // 2


def values_outside_strings(text: bytes) -> int:
    """How many values `text` holds as a parser counts them: strings, and the brackets and
    commas outside them (`shape_problem`'s count), line by line: no JSON string holds a
    raw line end, and a line with a stray quote must not hide the lines after it (a stdio
    read hands several messages on at once: attack-41 #3)."""
    counted = 0
    for line in text.split(b"\n"):
        plain = line.replace(b"\\\\", b"").replace(b'\\"', b"")
        outside = b"".join(plain.split(b'"')[::2])
        counted += plain.count(b'"') // 2 + outside.count(b"{") + outside.count(b"[")
        counted += outside.count(b",")
    return counted


def fits(text: bytes) -> bool:
    """Whether `text` is within every cap counting what strings hold too: so at least what
    is outside them, whichever quotes open a string (a few `bytes.count`, no copy)."""
    opened = text.count(b"{") + text.count(b"[")
    if opened > min(MAX_DEPTH, MAX_OBJECTS):  # else none can nest deeper or be too many
        return False
    return values(text) <= MAX_VALUES


def shape_problem(text: bytes) -> str | None:
    """Why one JSON text (a message) holds more than fim reads of an answer, or None.

    Counted, not parsed: parsing is the cost being bounded. C-level scans of the bytes
    (`count`, `replace`, `split`, `translate`) take a 16 MB answer 10 to 80 ms. Brackets
    and commas inside strings are not counted (a text block of source code holds any
    number): with every escaped backslash and quote removed, each quote left opens or
    closes a string. In a text that is not valid JSON the strings counted are a parser's up
    to where it would stop, so what the parser would read is counted in any case. "Values"
    are strings, commas and objects, about one for each key and value."""
    if fits(text):
        return None
    plain = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = plain.count(b'"') // 2
    if strings > MAX_VALUES:  # before the split below, whose cost grows with them
        return too_many(MAX_VALUES, "values")
    outside = b"".join(plain.split(b'"')[::2])
    brackets = outside.translate(_BRACKETS, _NOT_BRACKETS)  # `[` and `]` become `{` `}`
    if len(brackets) > 2 * MAX_OBJECTS:
        return too_many(MAX_OBJECTS, "objects and arrays")
    if strings + outside.count(b",") + len(brackets) // 2 > MAX_VALUES:
        return too_many(MAX_VALUES, "values")
    if brackets.count(b"{") > MAX_DEPTH:  # else it cannot nest deeper
        opening = ord("{")
        steps = (1 if byte == opening else -1 for byte in brackets)
        if max(itertools.accumulate(steps)) > MAX_DEPTH:
            return too_deep(MAX_DEPTH)
    return None


def lines_problem(lines: bytes) -> str | None:
    """`shape_problem` of each line of a stdio server's output: each line is a message of
    its own, and a quote one leaves open must not hide the structure of the next."""
    if fits(lines):
        return None
    for line in lines.split(b"\n"):
        why = shape_problem(line)
        if why is not None:
            return why
    return None


def event_problem(event: bytes) -> str | None:
    """`shape_problem` of an event's data, the JSON the SDK parses of it: the other fields
    (`id: "`) must not open a string that hides the data's structure."""
    if fits(event) and event.count(b"\n") + event.count(b"\r") <= MAX_EVENT_LINES:
        return None
    plain = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if plain.count(b"\n") > MAX_EVENT_LINES:
        return too_many(MAX_EVENT_LINES, "lines in one event")
    return shape_problem(b"\n".join(_DATA.findall(plain)))
