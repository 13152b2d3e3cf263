"""The a2a SDK's log of a JSON-RPC request it refuses, without a traceback (attack-50 F2).

The SDK's dispatcher answers a malformed request (`[1,2]`, `{"input": "x"}`, `params` of
the wrong shape) with a correct JSON-RPC error (-32600, -32602), but first logs the
validation's exception with `logger.exception`: an ERROR line and a traceback that any
key holder could write into the server's log at will, where ERROR means a fault of the
server. `quiet_refusals` installs a filter on the SDK's loggers that takes those records
for what they are, the client's mistake: the 1.0 dispatcher's is dropped (its own warning,
`Request Error ... Code=-32600`, follows and says the same), the 0.3 adapter's (nothing
follows it) becomes one warning line without the traceback, and so does the request
handler's ERROR "Validation failure" for a feature the card declares off (push
notifications, the extended card: attack-63 F3). Every other record, an unhandled
exception included, passes unchanged.

`out_of_range` refuses, before the SDK reads it, a `historyLength` no 32-bit field holds:
the 0.3 adapter's conversion raised on it outside its validation, answered -32603 and
logged a traceback at ERROR (attack-63 F3); the 1.0 names answered -32602, as this does.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

DISPATCHER = "a2a.server.routes.jsonrpc_dispatcher"
ADAPTER_03 = "a2a.compat.v0_3.jsonrpc_adapter"
HANDLER = "a2a.server.request_handlers.request_handler"

REFUSALS = {
    DISPATCHER: ("Failed to validate base JSON-RPC request", "Failed to parse request params"),
    ADAPTER_03: ("Failed to validate base JSON-RPC request for v0.3",),
}
"""Per SDK logger, the messages it logs with the exception of a request it refuses."""
VALIDATION = "Validation failure: "
"""How the request handler's ERROR for a feature the card declares off starts (the rest is
the SDK's own text, never the client's): a prefix, because where fim masks logs
(`fim.masking`) a record is made with its message already formatted."""
LOGGERS = (*REFUSALS, HANDLER)


class QuietRefusals(logging.Filter):
    """Drops, or turns into one warning line, the SDK's record of a refused request."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == HANDLER:  # no exception: its message says what was refused
            if not str(record.msg).startswith(VALIDATION):
                return True
            record.msg = f"A2A request refused: {record.msg}; answered with a JSON-RPC error"
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        if record.msg not in REFUSALS.get(record.name, ()):
            return True
        if record.name == DISPATCHER:  # its "Request Error" warning follows
            return False
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        problem = record.exc_info[1] if record.exc_info else None
        what = type(problem).__name__ if problem is not None else "no exception"
        record.args = (record.msg, what)  # the type only: the client's text stays out
        record.msg = "A2A request refused: %s (%s); answered with a JSON-RPC error"
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def quiet_refusals() -> None:
    """Install `QuietRefusals` on the SDK's loggers, once per process."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietRefusals) for f in logger.filters):
            logger.addFilter(QuietRefusals())


MAX_HISTORY = 2**31 - 1
"""The largest `historyLength` (a protobuf int32)."""


def out_of_range(body: Any) -> str | None:
    """Why a JSON-RPC request's `historyLength` (of `tasks/get`, or of a message's
    `configuration`) is refused: a whole number (as the SDK's lax parse reads one: `7`,
    `7.0`, `"7"`) outside 0..`MAX_HISTORY`."""
    params = body.get("params") if isinstance(body, dict) else None
    if not isinstance(params, dict):
        return None
    configuration = params.get("configuration")
    for where, holder in (("params", params), ("params.configuration", configuration)):
        value = _whole(holder.get("historyLength")) if isinstance(holder, dict) else None
        if value is not None and not 0 <= value <= MAX_HISTORY:
            return f"{where}.historyLength must be between 0 and {MAX_HISTORY}"
    return None


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    return None
