"""Why an MCP call or start failed, as exceptions the tool adapter turns into observations."""

from __future__ import annotations


class McpUnavailable(Exception):
    """The server is not running and could not be (re)started; `str()` is the reason."""


class McpCallTimeout(Exception):
    """The tool did not answer within the server's `timeout`."""


class McpServerLost(Exception):
    """The connection ended while the call was in flight (the server crashed or exited)."""


class McpRequestError(Exception):
    """The server answered the request with a JSON-RPC error (unknown tool, bad params)."""


class McpResultRejected(Exception):
    """The server's answer does not match the tool's own output schema, or the schema is
    too costly to check it against (`fim.mcp.checks`): fim did not use it."""


class NotSent(Exception):
    """The connection ended before the request left; safe to retry after a restart."""


def describe_exception(exc: BaseException) -> str:
    """One line for a failure, digging through anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    if isinstance(exc, TimeoutError):
        return text or "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
