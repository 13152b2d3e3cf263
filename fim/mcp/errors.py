"""Why an MCP call or start failed, as exceptions the tool adapter turns into observations."""

from __future__ import annotations

from pydantic_core import ValidationError

from fim.masking import known

MAX_REASON = 2_000
"""Characters of a failure's text an observation shows: a server writes it (an error's
message, the answer a validation error quotes), and a 5 MB message went to the model
whole."""
MAX_LISTED = 3
"""Validation errors an observation lists (with how many there were)."""
MAX_LISTED_FROM = 10_000
"""Validation errors past which none is listed, only their count: listing the first ones
builds them all (600,000 for 50,000 malformed content blocks: 1 s of the event loop and
300 MB; 10,000 take 16 ms), and `str()` of them all took 1 GB for 100,000 blocks, then
the process."""


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


def bounded(text: str, limit: int = MAX_REASON) -> str:
    """`text` cut to its first `limit` characters, saying how many more there were; masked
    before the cut (`Masker.head`), so no piece of a secret is left at it."""
    shown, cut = known().head(text, limit)
    return f"{shown}... ({cut:,} more characters)" if cut else shown


def describe_exception(exc: BaseException) -> str:
    """One line for a failure, digging through anyio's exception groups; a validation
    error (the SDK found an answer malformed) by its count and first errors, and every
    text at most `MAX_REASON` characters."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = _validation(exc) if isinstance(exc, ValidationError) else str(exc).strip()
    text = bounded(text)
    if isinstance(exc, TimeoutError):
        return text or "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _validation(exc: ValidationError) -> str:
    """`N validation errors for Model: where: why; ...` with the first `MAX_LISTED`, never
    the input they quote: `str(exc)` repeats a piece of the answer with every error."""
    count = exc.error_count()
    text = f"{count:,} validation error{'' if count == 1 else 's'} for {exc.title}"
    if count > MAX_LISTED_FROM:
        return text
    first = exc.errors(include_url=False, include_input=False, include_context=False)
    listed = [
        f"{'.'.join(str(part) for part in error['loc']) or '(the whole answer)'}: "
        + bounded(error["msg"], 200)
        for error in first[:MAX_LISTED]
    ]
    more = f" (and {count - MAX_LISTED:,} more)" if count > MAX_LISTED else ""
    return f"{text}: " + "; ".join(listed) + more
