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

import datetime as _dt
import json
import logging
import re
import sys
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


def announce(line: str, *, source: str = "fim.serve", **fields: Any) -> None:
    """A start-up line for whoever watches the process: printed on stderr as it is, or,
    when the log is JSON, written as a record of the `source` logger (`fim.serve`,
    `fim.worker`) with `fields`, so every line a log pipeline reads is JSON (a plain banner
    was rejected by its parser)."""
    if json_configured():
        logger = logging.getLogger(source)
        # handled whatever the log level: `--log-level warning` keeps the start-up line,
        # as it keeps the plain one
        logger.handle(logger.makeRecord(logger.name, logging.INFO, "", 0, line, (), None,
                                        extra=fields))  # fmt: skip
    else:
        print(line, file=sys.stderr, flush=True)


def configure(level: str, log_format: str) -> None:
    """Set up the root logger for `fim serve` and `fim worker`: text lines, or JSON lines
    on stderr."""
    if log_format == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(TextFormatter("%(levelname)s %(name)s: %(message)s"))
        logging.basicConfig(level=level.upper(), handlers=[handler])
