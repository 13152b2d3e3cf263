"""`fim serve --log-format json`: one JSON object per line, with trace and span ids.

Log pipelines (Loki, Elasticsearch, Cloud Logging) join these lines to traces by
`trace_id`/`span_id`, which come from the span current where the line was logged (the
request's server span, or the tool call of the run logging it) when tracing is on.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from typing import Any

from fim.masking import known
from fim.observe import tracing_enabled

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


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
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_text:  # made (and masked) with the record
            entry["exception"] = record.exc_text
        elif record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # The line as written, masked whole (fim.masking knows each secret's JSON-escaped
        # forms): `extra=` values and the traceback are not masked when the record is made.
        return known().text(json.dumps(entry, default=str, ensure_ascii=False))


def configure(level: str, log_format: str) -> None:
    """Set up the root logger for `fim serve`: text lines, or JSON lines on stderr."""
    if log_format == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    else:
        logging.basicConfig(level=level.upper(), format="%(levelname)s %(name)s: %(message)s")
