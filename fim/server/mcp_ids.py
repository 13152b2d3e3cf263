"""A `/mcp` request whose JSON-RPC `id` is neither a string nor an integer gets `-32600`.

The MCP SDK's message union takes such a body (`"id": 1.5`, `{}`, `[1]`, `NaN`) as a
notification with the `id` ignored: inside a session it answered `202` with no body, ran
nothing and logged nothing, and the client waited for an answer that never came
(attack-63 F4). JSON-RPC 2.0 asks for `-32600 Invalid Request`, which A2A already answers.
The body is read here (at most the server's body limit, plus one byte: a larger one is
handed on for the SDK's own 413) and handed on unchanged when its ids are fine.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

from starlette.types import Receive, Scope, Send

from fim.server.replies import jsonrpc_error


async def with_checked_ids(
    scope: Scope, receive: Receive, send: Send, limit: int
) -> Receive | None:
    """A `receive` replaying the request's body when its ids are fine, or None once a
    `-32600` was answered."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more and size <= limit:
        message = await receive()
        if message["type"] != "http.request":  # the client left: the SDK sees it too
            return _replay(chunks, message, more=bool(chunks))
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = message.get("more_body", False)
    if not more and (bad := _bad_id(b"".join(chunks))) is not None:
        await jsonrpc_error(-32600, f"Invalid Request: {bad}")(scope, receive, send)
        return None
    return _replay(chunks, None, more, receive)


def _bad_id(body: bytes) -> str | None:
    """Why the body's `id` (or one message's, in a batch) is not a JSON-RPC id, or None."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the SDK answers a parse error itself
    for message in data if isinstance(data, list) else [data]:
        if not isinstance(message, dict) or "id" not in message:
            continue
        value = message["id"]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | str)):
            return f"an id is a string or an integer, not {json.dumps(value)[:40]}"
    return None


def _replay(
    chunks: list[bytes],
    last: MutableMapping[str, Any] | None,
    more: bool = False,
    rest: Receive | None = None,
) -> Receive:
    """A `receive` that gives the body read so far as one message, then the rest."""
    sent = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            if last is not None and not chunks:
                return last
            return {"type": "http.request", "body": b"".join(chunks), "more_body": more}
        if last is not None:
            return last
        assert rest is not None
        return await rest()

    return receive


__all__ = ["with_checked_ids"]
