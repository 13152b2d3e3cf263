"""MCP sampling: a server asks the client's model for a completion (`sampling/createMessage`).

fim answers with the `fast` model (the agent's own when no `fast` is declared) of the run
whose tool call asked: the one run whose requests are in flight on the connection
(`fim.mcp.caller.asking_run`, as for elicitation), held to that run's budgets and its key's.
A connection serves every run and key, so with no run or several runs in flight the
request is declined: never billed to a bystander, never served unmetered. The request is
server-written and so untrusted: the conversation is size-capped, tools are refused,
`max_tokens` is capped, and any model failure becomes an MCP error rather than an
exception in the session. The request is refused once the asking run is over, and a
completion still going when it ends is cancelled (counted at its `max_tokens` in a usage
row of the run's own: `fim.run.ledger.spent_late`): a server that answers its tool call
without waiting for the sampling gets nothing the run's budgets did not count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fim.locks import current_owner
from fim.mcp.caller import asking_run
from fim.mcp.content import render_content
from fim.types import Message
from fim.windows import admit

if TYPE_CHECKING:
    from mcp.client.session import SamplingFnT

    from fim.mcp.jobs import Requests

log = logging.getLogger(__name__)

MAX_SAMPLING_TOKENS = 2048
MAX_SAMPLING_MESSAGES = 50
MAX_SAMPLING_CHARS = 100_000
SAMPLING_PER_MINUTE = 20
SAMPLING_AT_ONCE = 2


def sampling_callback(conn: Requests, clock: Callable[[], float] = time.monotonic) -> SamplingFnT:
    """The SDK `sampling_callback` for one connection; the model is the asking run's, found
    per request. The server pays with the operator's tokens: at most `SAMPLING_PER_MINUTE`
    requests a minute are served, and `SAMPLING_AT_ONCE` at a time (a server asking in a
    loop was served without end)."""
    server = conn.name
    served: deque[float] = deque()
    going: list[asyncio.Semaphore] = []

    async def on_sample(context: Any, params: Any) -> Any:
        # deferred: loading mcp_types costs hundreds of ms
        import mcp_types

        def refuse(message: str) -> Any:
            log.warning("MCP server '%s': sampling refused: %s", server, message)
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=message)

        wait = admit(served, SAMPLING_PER_MINUTE, 60.0, clock())
        if wait is not None:
            return refuse(
                f"more than {SAMPLING_PER_MINUTE} sampling requests in a minute; "
                f"ask again in {wait:.0f}s"
            )
        if not going:
            going.append(asyncio.Semaphore(SAMPLING_AT_ONCE))
        async with going[0]:
            return await _sample(conn, params, refuse)

    return on_sample


async def _sample(conn: Requests, params: Any, refuse: Any) -> Any:
    """One sampling request served by the asking run's model (or refused)."""
    # deferred: loading mcp_types costs hundreds of ms
    import mcp_types

    asking = asking_run(conn, "asked for a model completion (sampling)", sampling="declined")
    if isinstance(asking, str):
        return refuse(f"fim cannot tell which run this sampling request is for: {asking}")
    caller = asking[0]
    if getattr(params, "tools", None):
        return refuse("fim does not offer tools to sampling requests")
    messages = to_messages(params)
    if isinstance(messages, str):
        return refuse(messages)
    messages = _masked(messages, caller, conn.name)
    options: dict[str, Any] = {"max_tokens": min(params.max_tokens, MAX_SAMPLING_TOKENS)}
    if params.temperature is not None:
        options["temperature"] = params.temperature
    if params.stop_sequences:
        options["stop"] = list(params.stop_sequences)[:4]
    # the SDK's task runs this, in the context of whoever started the connection: the key
    # budget is the asking run's key's
    owner = current_owner.set(caller.owner)
    try:
        model = caller.sampling() if caller.sampling is not None else None
        if model is None:
            return refuse(f"run {caller.run_id} has no metered model to serve sampling")
        run = caller.spend() if caller.spend is not None else None
        if run is not None and run.over:  # its tool call returned and the run ended since
            return refuse(f"run {caller.run_id} has ended")
        response = await _for_run(run, model.complete(messages, **options))
        if response is None:
            return refuse(f"run {caller.run_id} ended before the model answered")
    except Exception as exc:  # the server gets an error, the session stays up
        return refuse(f"the model failed: {type(exc).__name__}")
    finally:
        current_owner.reset(owner)
    log.info(
        "MCP server '%s': sampling served by %s for run %s", conn.name, model.name, caller.run_id
    )
    return mcp_types.CreateMessageResult(
        role="assistant",
        content=mcp_types.TextContent(type="text", text=response.message.content or ""),
        model=response.model or model.name,
        stop_reason="endTurn",
    )


async def _for_run(run: Any, call: Coroutine[Any, Any, Any]) -> Any:
    """`call`'s answer, or None when `run` (its `fim.run.tree.RunSpend`) ended first: the
    call goes in a task of its own that the run's end cancels (`RunSpend.ends`), so a
    completion never outlives the run whose budgets hold it."""
    task = asyncio.ensure_future(call)
    if run is None:
        return await task

    def cancel() -> None:
        task.cancel()

    run.ends.append(cancel)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.cancelled() or _cancelling():
            task.cancel()  # the SDK's request itself was cancelled: the call goes with it
            raise
        return None
    finally:
        if cancel in run.ends:
            run.ends.remove(cancel)


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not only a task it awaits)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


def _masked(messages: list[Message], caller: Any, server: str) -> list[Message]:
    """`messages` with the project's secrets masked, as a tool result is before the model
    sees it, and the run told when one was: the server wrote them, and they go to the
    operator's model provider (a server summarising a config it holds sent its passwords,
    attack-55 F3). Always: the agent's `mask_observations` is about its own tool results."""
    shown = [m.model_copy(update={"content": caller.mask(m.content or "")}) for m in messages]
    if any(a.content != (b.content or "") for a, b in zip(shown, messages, strict=True)):
        caller.notice(
            f"a secret in MCP server '{server}'s sampling request was masked before it was "
            "sent to the model",
            server=server,
            masked="sampling",
        )
    return shown


def to_messages(params: Any) -> list[Message] | str:
    """The request as fim messages (media as text placeholders), or why it is refused."""
    if len(params.messages) > MAX_SAMPLING_MESSAGES:
        return f"more than {MAX_SAMPLING_MESSAGES} messages"
    messages: list[Message] = []
    if params.system_prompt:
        messages.append(Message(role="system", content=params.system_prompt))
    for message in params.messages:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        text = "\n".join(render_content(b) for b in blocks)
        messages.append(Message(role=message.role, content=text))
    if sum(len(m.content or "") for m in messages) > MAX_SAMPLING_CHARS:
        return f"the conversation is longer than {MAX_SAMPLING_CHARS} characters"
    return messages
