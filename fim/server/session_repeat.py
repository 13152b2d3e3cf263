"""A request that names a session *and* sends the conversation so far (newcomer-54 #2).

A client that keeps its own history (the OpenAI SDK's way) and also sends a `session_id`
sends, on its second turn, `[u1, a1, u2]` to a session that holds `[u1, a1]`: prepending
the session's history to the request's messages made the run see `u1, a1, u1, a1, u2` and
the session keep every earlier turn twice, its budget paying for both.

The rule (`conversation`): when the request's messages repeat the session's stored history
(they begin with it, or, for a session trimmed to its newest turns, contain it whole and
go on past it), only what follows the repeat is new: the conversation is the session's
history and those new messages. Otherwise the request's messages are new turns, added after
the history, as before (a client that sends only the new turn). Messages are compared by
role, masked text, tool calls and tool call id: what the session stored and what the client
got back (masked) are the same message.
"""

from __future__ import annotations

from typing import Any

from fim.masking import known
from fim.types import Message


def _same(message: Message) -> tuple[Any, ...]:
    masker = known()
    return (
        message.role,
        masker.text(message.content or ""),
        tuple((c.id, c.name) for c in message.tool_calls),
        message.tool_call_id or "",
    )


def repeated(history: list[Message], incoming: list[Message]) -> int:
    """How many of `incoming`'s first messages repeat `history` (0: none): the end of the
    first place where `history` occurs whole in `incoming` with something after it."""
    if not history or len(incoming) <= len(history):
        return 0
    stored = [_same(m) for m in history]
    sent = [_same(m) for m in incoming]
    for start in range(len(sent) - len(stored)):
        if sent[start : start + len(stored)] == stored:
            return start + len(stored)
    return 0


def conversation(history: list[Message], incoming: list[Message]) -> list[Message]:
    """The run's messages: the session's `history`, then what the request sent that does
    not repeat it."""
    return [*history, *incoming[repeated(history, incoming) :]]


__all__ = ["conversation", "repeated"]
