"""The a2a SDK's log of a JSON-RPC request it refuses, without a traceback (attack-50 F2).

The SDK's dispatcher answers a malformed request (`[1,2]`, `{"input": "x"}`, `params` of
the wrong shape) with a correct JSON-RPC error (-32600, -32602), but first logs the
validation's exception with `logger.exception`: an ERROR line and a traceback that any
key holder could write into the server's log at will, where ERROR means a fault of the
server. `quiet_refusals` installs a filter on the SDK's loggers that takes those records
for what they are, the client's mistake: the 1.0 dispatcher's is dropped (its own warning,
`Request Error ... Code=-32600`, follows and says the same), the 0.3 adapter's (nothing
follows it) becomes one warning line without the traceback. Every other record, an
unhandled exception included, passes unchanged.
"""

from __future__ import annotations

import logging

DISPATCHER = "a2a.server.routes.jsonrpc_dispatcher"
ADAPTER_03 = "a2a.compat.v0_3.jsonrpc_adapter"

REFUSALS = {
    DISPATCHER: ("Failed to validate base JSON-RPC request", "Failed to parse request params"),
    ADAPTER_03: ("Failed to validate base JSON-RPC request for v0.3",),
}
"""Per SDK logger, the messages it logs with the exception of a request it refuses."""


class QuietRefusals(logging.Filter):
    """Drops, or turns into one warning line, the SDK's record of a refused request."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in REFUSALS.get(record.name, ()):
            return True
        if record.name == DISPATCHER:  # its "Request Error" warning follows
            return False
        problem = record.exc_info[1] if record.exc_info else None
        what = type(problem).__name__ if problem is not None else "no exception"
        record.args = (record.msg, what)  # the type only: the client's text stays out
        record.msg = "A2A request refused: %s (%s); answered with a JSON-RPC error"
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_refusals() -> None:
    """Install `QuietRefusals` on the SDK's loggers, once per process."""
    for name in REFUSALS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietRefusals) for f in logger.filters):
            logger.addFilter(QuietRefusals())
