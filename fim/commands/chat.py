"""`fim run AGENT` without a prompt, at a terminal: a multi-turn chat, kept as a session.

Every chat is a session of the state store (what `--session NAME` continues, the rows
`session_id` reads over HTTP): a chat started without `--session` gets a name of its own,
`chat-AGENT-HHMM`, so it can be continued later, and leaving it says how
(`fim run AGENT --session NAME`). With `--session NAME` the chat says whether it continues
that session, and with how many messages.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from fim.commands import user_errors
from fim.commands.run_turn import CliSession, run_turn

if TYPE_CHECKING:
    from fim.commands.run_view import EventPrinter
    from fim.types import Message

CHAT_HELP = """\
Type a message and press Enter; the whole conversation is sent each turn.
  /help    this help
  /session this chat's session, and how to continue it later
  /reset   forget the conversation so far
  /exit    leave (also /quit, Ctrl-D)"""

MAX_SAME_NAME = 100
"""Names tried for a chat (`chat-AGENT-HHMM`, `-2`, ...) before one gets a random suffix."""


def chat_name(agent: str, now: float | None = None) -> str:
    """The session name of a chat started without `--session`: `chat-AGENT-HHMM`, local
    time (`now`: a test's clock)."""
    return f"chat-{agent}-{time.strftime('%H%M', time.localtime(now))}"


async def chat(
    snapshot: Any,
    agent: str,
    model: str | None,
    view: EventPrinter,
    stream: bool,
    session: str | None = None,
) -> int:
    """A multi-turn chat: the conversation so far is resent on every turn and kept in the
    session `session` (a new `chat-AGENT-HHMM` one when None)."""
    kept = CliSession(snapshot, session or chat_name(agent))
    try:
        with user_errors():
            if session is None:
                await _free_name(kept)
            history = await kept.history()
        _banner(agent, kept.name, len(history), named=session is not None)
        saved = await _turns(snapshot, agent, model, view, stream, kept, history)
        if saved:
            print(f"continue with: fim run {agent} --session {kept.name}", file=sys.stderr)
        return 0
    finally:
        await kept.services.aclose()


async def _free_name(kept: CliSession) -> None:
    """Rename `kept` until no session has its name: a second chat started in the same
    minute (or at the same time another day) must not continue the first."""
    base = kept.name
    for number in range(2, MAX_SAME_NAME + 2):
        if not await kept.taken():
            return
        kept.name = f"{base}-{number}"
    kept.name = f"{base}-{uuid.uuid4().hex[:6]}"


def _banner(agent: str, name: str, messages: int, *, named: bool) -> None:
    leave = "/help for commands, Ctrl-D or /exit to leave."
    if named and messages:
        said = f"{messages} message" + ("" if messages == 1 else "s")
        print(f"Continuing session {name} ({said}) with {agent}. {leave}", file=sys.stderr)
    elif named:
        print(f"Chatting with {agent} in new session {name}. {leave}", file=sys.stderr)
    else:
        print(f"Chatting with {agent} (session {name}). {leave}", file=sys.stderr)


async def _turns(
    snapshot: Any,
    agent: str,
    model: str | None,
    view: EventPrinter,
    stream: bool,
    kept: CliSession,
    history: list[Message],
) -> bool:
    """The chat's turns until the person leaves; True when the session holds something."""
    # deferred: loading pydantic_core costs tens of ms
    from fim.types import Message

    saved = bool(history)
    while True:
        try:
            line = await asyncio.to_thread(input, "you> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return saved
        command = line.strip()
        if command in {"/exit", "/quit"}:
            return saved
        if command in {"/help", "/?"}:
            print(CHAT_HELP, file=sys.stderr)
            print(_where(agent, kept.name), file=sys.stderr)
            continue
        if command == "/session":
            print(_where(agent, kept.name), file=sys.stderr)
            continue
        if command == "/reset":
            history.clear()
            print("(conversation cleared)", file=sys.stderr)
            continue
        if command.startswith("/") and " " not in command:
            print(f"unknown command {command} (/help lists them)", file=sys.stderr)
            continue
        if not command:
            continue
        history.append(Message(role="user", content=line))
        code, output = await run_turn(snapshot, agent, list(history), model, view, stream, kept)
        history.append(Message(role="assistant", content=output))
        if code == 0:
            await kept.save(history)
            saved = True


def _where(agent: str, name: str) -> str:
    return f"session: {name} (continue it later: fim run {agent} --session {name})"
