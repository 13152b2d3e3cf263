"""Where in the project's own code an exception came from: the traceback of a Python tool
or a Python hook that raised, cut down to the project's frames (newcomer-53 #1).

The model reads only `Error: tool 'lookup_order' failed: KeyError: 2` (or the hook's
block reason): a traceback names the project's files, its code and what a message held,
which a model steered by injected text could echo to a user, so it never goes into a
prompt. The developer gets it on the run's events instead (`tool_result`, `hook`: fields
`at` and `traceback`), and from there in `fim run -v`, `fim runs show`, the trace
(an `exception` span event) and `fim serve`'s log.

What is kept: the frames whose file lies under the project's root, named relative to it
(`hooks/mytools.py`), innermost last as Python prints them; a run of frames elsewhere (fim
itself, the standard library, site-packages, a virtualenv inside the project) is one line
saying how many were hidden. The text is described where the exception is caught (in the
worker thread of a sync tool: only text leaves it), masked by the one masking policy and
bounded (`MAX_TRACEBACK_CHARS`); the source lines are read as Python's own traceback reads
them (`linecache`).
"""

from __future__ import annotations

import linecache
import os
import traceback
from dataclasses import dataclass
from typing import Any

import fim
from fim.masking import clipped, known

MAX_TRACEBACK_CHARS = 8_000
"""The most of one traceback kept on an event (head and tail, masked before the cut)."""

HEADER = "Traceback (most recent call last; the project's frames only):"

_FIM = os.path.dirname(os.path.abspath(fim.__file__)) + os.sep
_NOT_THE_PROJECTS = frozenset({"site-packages", "dist-packages", "__pycache__"})


@dataclass(frozen=True)
class Raised:
    """An exception as the developer reads it: `at` is the innermost project frame
    (`hooks/mytools.py:10 in lookup_order`), `traceback` the trimmed text."""

    at: str
    traceback: str


def described(exc: BaseException, root: str | os.PathLike[str] | None) -> Raised | None:
    """`exc` with its traceback trimmed to the frames under `root`; None without a root or
    when no frame is the project's (the failure is fim's or a library's alone: nothing in
    the project to point at)."""
    if root is None:
        return None
    base = os.path.abspath(os.fspath(root))
    lines: list[str] = [HEADER + "\n"]
    kept: list[traceback.FrameSummary] = []
    hidden = 0
    at = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        rel = _relative(code.co_filename, base)
        if rel is None:
            hidden += 1
            continue
        if hidden:
            lines += [*_frames(kept), _hidden(hidden)]
            kept, hidden = [], 0
        line = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
        kept.append(traceback.FrameSummary(rel, lineno, code.co_name, line=line or None))
        at = f"{rel}:{lineno} in {code.co_name}"
    if at is None:
        return None
    lines += _frames(kept) + ([_hidden(hidden)] if hidden else [])
    lines += traceback.format_exception_only(type(exc), exc)
    text = known().text("".join(lines).rstrip("\n"))
    return Raised(at=at, traceback=clipped(text, MAX_TRACEBACK_CHARS, "traceback"))


def _relative(filename: str, base: str) -> str | None:
    """`filename` relative to the project's root (`hooks/mytools.py`), or None when it is
    not the project's own code."""
    if not os.path.isabs(filename) or filename.startswith(_FIM):
        return None
    rel = os.path.relpath(filename, base)
    parts = rel.split(os.sep)
    if parts[0] == os.pardir or any(p in _NOT_THE_PROJECTS or p.startswith(".") for p in parts):
        return None
    return "/".join(parts)


def _frames(kept: list[traceback.FrameSummary]) -> list[str]:
    """Python's own rendering of the frames (a recursion's repeats collapsed)."""
    return traceback.StackSummary.from_list(kept).format() if kept else []


def _hidden(count: int) -> str:
    return f"  [{count} frame{'s' if count != 1 else ''} outside the project hidden]\n"


def exception_attributes(text: str) -> dict[str, Any]:
    """The OpenTelemetry `exception` event's attributes (`exception.type`,
    `exception.message`, `exception.stacktrace`) of a traceback `described` wrote."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines[1:], 1) if line and not line[0].isspace()),
        len(lines) - 1,
    )
    kind, _, message = "\n".join(lines[start:]).partition(": ")
    return {
        "exception.type": kind.strip(),
        "exception.message": message.strip(),
        "exception.stacktrace": text,
    }


def raised_line(event: Any) -> str | None:
    """What `fim serve` logs of a `tool_result` or `hook` event whose project code raised
    (`tool 'lookup_order' raised KeyError: 2 at hooks/mytools.py:10 in lookup_order`), or
    None for any other event."""
    at, text = getattr(event, "at", None), getattr(event, "traceback", None)
    if not at or not text:
        return None
    found = exception_attributes(text)
    error = f"{found['exception.type']}: {found['exception.message']}".splitlines()[0]
    who = f"hook '{event.hook}'" if event.type == "hook" else f"tool '{event.name}'"
    return f"{who} raised {error[:300]} at {at}"


def raised_fields(where: Raised | None) -> dict[str, str]:
    """`{"at": ..., "traceback": ...}` for a result's metadata or an event, or nothing."""
    return {} if where is None else {"at": where.at, "traceback": where.traceback}


__all__ = [
    "MAX_TRACEBACK_CHARS",
    "Raised",
    "described",
    "exception_attributes",
    "raised_fields",
    "raised_line",
]
