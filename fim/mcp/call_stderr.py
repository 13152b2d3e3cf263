"""What a stdio MCP server wrote to its stderr while a call of it failed (newcomer-54 #4).

A tool that raises inside the server answers `isError` with a short text (mcp 2.x masks an
unexpected exception as "Error executing tool get_stock"); the traceback it printed went to
the server's captured stderr (`fim.mcp.transport.StderrLog`, bounded) and was read only
when the server crashed or failed to start. Now a failing call of a stdio server keeps what
the server wrote while it ran, masked, in the result's metadata: `at`, the error's line
(`MCP server 'inventory' stderr: ValueError: ...`), and `traceback`, at most
`CALL_STDERR_CHARS` of it (its head and its end). The run's `tool_result` event carries
both (as a project's Python tool's frames: never to the model), `fim run -v` and `fim runs
show` print the `at` line, and the logger `fim.mcp.<server>` logs it at INFO (`fim
serve`'s log). Calls running at the same time on one server share its stderr: what they
wrote meanwhile is in each.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING

from fim.masking import clipped, known
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.mcp.connection import ServerConnection

CALL_STDERR_CHARS = 8000
"""Characters of a failed call's stderr kept: its head and its end (`clipped`)."""
READ_CHARS = 64 * 1024
"""Characters of it read to find the error's line: a log handler's boxed traceback (the
SDK's) is kilobytes, and the cause it wraps comes first."""
_FRAME = " \t│┃║|╭╮╰╯─━"
"""What a log handler draws around a traceback's lines."""
AT_CHARS = 300
"""Characters of the `at` line (the error's line in the stderr, `_error_line`)."""
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b[^:\s]*:")


def mark(conn: ServerConnection) -> int | None:
    """Where the server's stderr ends now (None: no captured stderr, not stdio)."""
    log = conn.stderr_log()
    return os.fstat(log.file.fileno()).st_size if log is not None else None


def since(conn: ServerConnection, start: int | None) -> str:
    """What the server wrote to stderr since `start` (`mark`), masked, at most its last
    `READ_CHARS` characters; from the start of what is kept when the file was trimmed
    meanwhile."""
    log = conn.stderr_log()
    if log is None or start is None:
        return ""
    fd = log.file.fileno()
    end = os.fstat(fd).st_size
    begin = start if start <= end else 0  # trimmed meanwhile: what is left
    begin = max(begin, end - READ_CHARS * 4)
    raw = os.pread(fd, end - begin, begin).decode("utf-8", "replace")
    masker = known()
    text = conn.mask(masker.text(raw))  # whole, then cut: no piece of a secret at the cut
    if begin > start:
        text = masker.edge(text, at="start")
    shown, cut = masker.tail(text.strip(), READ_CHARS)
    return ("..." + shown) if cut else shown


def _error_line(text: str, answered: str) -> str:
    """The line that says what failed: the last exception line (`ValueError: ...`) that
    says more than the call's answer (`answered`: the SDK's own "Error executing tool x" is
    no news), one of a plain traceback first (at the start of its line), then one inside a
    log handler's box (indented, framed, wrapped); else the last line written."""
    lines = [line for line in text.splitlines() if line.strip()]
    for plain in (True, False):
        for line in reversed(lines):
            shown = line if plain else line.strip(_FRAME).strip()
            found = _EXCEPTION.match(shown)
            if found and shown[found.end() :].strip() not in answered:
                return shown.strip()
    return lines[-1].strip(_FRAME).strip() if lines else ""


def attach(conn: ServerConnection, tool: str, result: ToolResult, start: int | None) -> None:
    """A failed call's stderr into `result`'s metadata (`at`, `traceback`) and the log."""
    if not result.is_error:
        return
    text = since(conn, start)
    if not text:
        return
    last = _error_line(text, result.content)
    where = f"MCP server '{conn.name}' stderr: {known().head(last, AT_CHARS)[0]}"
    result.metadata.setdefault("at", where)
    kept = clipped(text, CALL_STDERR_CHARS, "stderr")  # a boxed traceback: its cause first
    result.metadata.setdefault("traceback", kept)
    logging.getLogger(f"fim.mcp.{conn.name}").info(
        "MCP tool '%s' of server '%s' failed; its stderr meanwhile:\n%s", tool, conn.name, kept
    )


__all__ = ["CALL_STDERR_CHARS", "attach", "mark", "since"]
