"""The log lines of `fim serve` and `fim worker`: text (the default) or, with
`--log-format json`, one JSON object per line, with trace and span ids.

Log pipelines (Loki, Elasticsearch, Cloud Logging) join JSON lines to traces by
`trace_id`/`span_id`, which come from the span current where the line was logged (the
request's server span, or the tool call of the run logging it) when tracing is on.

Either way one record is one line: a message quotes what others wrote (a request's path,
a model's or provider's error text), and a newline in it would write a second, forged
line, an escape sequence would reach the terminal of whoever watches the log.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

from fim.masking import known
from fim.observe import tracing_enabled
from fim.terminal import printable

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_DROPPED = {"color_message"}
"""`extra=` fields never written: uvicorn's `color_message`, the message again with ANSI
colour escapes."""
_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What a one-line message may not hold: control characters (newlines and tabs too), line
and paragraph separators, and the bidirectional overrides that reorder what is shown."""


def one_line(text: str) -> str:
    """`text` with every character `_BREAKS` names written as its escape (`\\n`,
    `\\x1b`): one line, which a terminal shows and never obeys."""
    if text.isprintable() or not _BREAKS.search(text):
        return text
    return _BREAKS.sub(lambda m: m.group(0).encode("unicode_escape").decode(), text)


class TextFormatter(logging.Formatter):
    """The text log line (`%(levelname)s %(name)s: %(message)s`), one line per record
    whatever its message holds; a traceback keeps its lines, its escapes shown, not
    obeyed (`fim.terminal.printable`)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return printable(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return printable(super().formatStack(stack_info))


def trace_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) of the current span, hex, or None when tracing is off."""
    if not tracing_enabled():
        return None
    # deferred: loading fim.events costs hundreds of ms
    from fim.observe.tracing import current_span

    context = current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON: time, level, logger, message, trace ids, any
    `extra=` fields, and the exception text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _dt.datetime.fromtimestamp(record.created, _dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,  # `--workers N`: which process wrote it (newcomer-52 #8)
        }
        ids = trace_ids()
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry and key not in _DROPPED:
                entry[key] = value
        if record.exc_text:  # made (and masked) with the record
            entry["exception"] = record.exc_text
        elif record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # The line as written, masked whole (fim.masking knows each secret's JSON-escaped
        # forms): `extra=` values and the traceback are not masked when the record is made.
        return known().text(json.dumps(entry, default=str, ensure_ascii=False))


def json_configured() -> bool:
    """Whether the root logger writes JSON lines (`configure(..., "json")`)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def announce(line: str, *, logger_name: str = "fim.serve", **fields: Any) -> None:
    """A start-up line for whoever watches the process: printed on stderr as it is, or,
    when the log is JSON, written as a record of the `logger_name` logger (`fim.serve`,
    `fim.worker`) with `fields` (`source`: a `--git` remote), so every line a log
    pipeline reads is JSON (a plain banner was rejected by its parser)."""
    if json_configured():
        logger = logging.getLogger(logger_name)
        # handled whatever the log level: `--log-level warning` keeps the start-up line,
        # as it keeps the plain one
        logger.handle(logger.makeRecord(logger.name, logging.INFO, "", 0, line, (), None,
                                        extra=fields))  # fmt: skip
    else:
        print(line, file=sys.stderr, flush=True)


class StderrRecords(io.TextIOBase):
    """`sys.stderr` of `fim serve --log-format json` (`json_stderr`): each line written
    to it (a start-up warning, a validation failure at start, `error: git clone failed`)
    becomes a record of the `source` logger, a warning when the line says it is one, an
    error otherwise, so every line a log pipeline reads is JSON (newcomer-52 #9)."""

    def __init__(self, source: str = "fim.serve") -> None:
        self._logger = logging.getLogger(source)
        self._partial = ""
        self.stream = sys.stderr
        """The stream it stands in front of, where the log's handler writes (`configure`)."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            if line.strip():
                self._emit(line)
        return len(text)

    def flush(self) -> None:
        if self._partial.strip():
            self._emit(self._partial)
        self._partial = ""

    def _emit(self, line: str) -> None:
        level = logging.WARNING if "warning" in line[:120].lower() else logging.ERROR
        record = self._logger.makeRecord(self._logger.name, level, "", 0, line, (), None)
        self._logger.handle(record)  # whatever the log level, as the plain line was


@contextlib.contextmanager
def json_stderr(on: bool, source: str = "fim.serve") -> Iterator[None]:
    """While the block runs, with `on` (`--log-format json`, configured first): what fim
    writes to stderr is JSON records (`StderrRecords`); the log's own handler keeps the
    stream it was made with."""
    if not on:
        yield
        return
    lines = StderrRecords(source)
    try:
        with contextlib.redirect_stderr(lines):
            yield
    finally:
        lines.flush()


def configure(level: str, log_format: str) -> None:
    """Set up the root logger for `fim serve` and `fim worker`: text lines, or JSON lines
    on stderr (the stream behind `StderrRecords` when `json_stderr` has put it in front)."""
    stream = sys.stderr
    stream = stream.stream if isinstance(stream, StderrRecords) else stream
    if log_format == "json":
        handler = logging.StreamHandler(stream)
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    else:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(TextFormatter("%(levelname)s %(name)s: %(message)s"))
        logging.basicConfig(level=level.upper(), handlers=[handler])
