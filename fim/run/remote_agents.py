"""Remote A2A agents (fim.yaml `a2a_agents:`), called through `call_agent`.

An agent lists a remote agent in `delegates:` like a local one; `call_agent` offers it in its
catalogue (its declared `description`, else its agent card's) and sends it the task with the
a2a-sdk client (`ClientFactory`, a blocking `SendMessage`). The answer is the remote task's
final text: its artifacts' text parts, else its status message, else the message it replied.

One remote `contextId` per (caller's key, fim conversation, remote agent): the conversation
is the one every run of a request's tree belongs to (`fim.run.tree.RunSpend.conversation`:
the session the request continues, else the root run), so a second turn of a fim session,
or a second call in one run, continues the remote conversation. The id is derived from those
three (stable across processes and workers, nothing to store); a remote that answers with a
context of its own is sent that one from then on, in this process.

A failure, a task that ends `input-required`, `auth-required`, `failed` or `rejected`, an
HTTP 401/403 or the agent's `timeout` is a tool error (`is_error`) naming the remote agent,
masked by the snapshot's masking policy like every text that leaves fim; never a traceback.
The a2a-sdk is the optional extra `fim[a2a]`, imported at the first call only: a project
that declares remote agents without it gets `pip install 'fim[a2a]'` (preflight refuses the
run of an agent that delegates to one, `remote_problems`, and a call says it too).
"""

from __future__ import annotations

import hashlib
import importlib.util
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.types import ToolResult

if TYPE_CHECKING:
    import httpx

    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl
    from fim.config.schema.project import A2aAgent
    from fim.run.services import RunContext

INSTALL = "pip install 'fim[a2a]'"
CARD_PATH = "/.well-known/agent-card.json"
CARD_SECONDS = 10.0
"""Most seconds reading a card for the catalogue's description may take (the run waits)."""
_RETRY_CARD = 60.0
"""Seconds before a card that could not be read is asked again for a description."""
_KEPT = 4096

_Key = tuple[str, str, str, str]
_CONTEXTS: OrderedDict[_Key, str] = OrderedDict()
"""(owner, conversation, name, url) -> the context id the remote answered with, when it
was not the one fim sent (a remote that assigns its own), most recently used last."""
_CARDS: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
"""Card URL -> (when read, by `time.monotonic`; its description, "" for none, None when
it could not be read)."""


def card_url(url: str) -> str:
    """Where the agent card of the remote agent declared at `url` is: `url` itself when it
    names a JSON file, else the well-known path under the endpoint."""
    text = url.strip()
    if text.split("?", 1)[0].endswith(".json"):
        return text
    return text.rstrip("/") + CARD_PATH


def remote_names(snapshot: Snapshot, agent: AgentDecl) -> list[str]:
    """The names of `agent`'s delegates that are remote A2A agents (declared, available or
    not): a local agent of the same name is a validate error, and wins at run time."""
    declared = snapshot.project.a2a_agents
    unavailable = getattr(snapshot, "unavailable_a2a", {})
    return [
        n
        for n in agent.delegates
        if n not in snapshot.agents and (n in declared or n in unavailable)
    ]


def remote_problems(snapshot: Snapshot, agent: AgentDecl) -> list[RunError]:
    """Why a run of `agent` would fail for a remote delegate (preflight): one an unset
    `${VAR}` makes unavailable, or the a2a-sdk not installed."""
    names = remote_names(snapshot, agent)
    check = getattr(snapshot, "unavailable", None)
    problems = [e for n in names if check is not None and (e := check("a2a", n)) is not None]
    if names and importlib.util.find_spec("a2a") is None:
        problems.append(
            RunError(
                f"it delegates to remote A2A agent '{names[0]}', which needs the a2a-sdk "
                "(not installed)",
                hint=INSTALL,
            )
        )
    return problems


def conversation(ctx: RunContext) -> str:
    """The conversation the run belongs to: its tree's (`RunSpend.conversation`), else its
    session, else its own id."""
    spend = ctx.spend
    root = spend.root if spend is not None else None
    if root is not None and root.conversation:
        return str(root.conversation)
    return ctx.session or ctx.run_id


def context_id(ctx: RunContext, name: str, decl: A2aAgent) -> tuple[_Key, str]:
    """(the key of the remote conversation, the context id to send)."""
    key = (ctx.owner, conversation(ctx), name, decl.url)
    known = _CONTEXTS.get(key)
    if known is not None:
        _CONTEXTS.move_to_end(key)
        return key, known
    digest = hashlib.sha256("\0".join(key).encode(errors="surrogateescape")).hexdigest()
    return key, f"fim-{digest[:32]}"


def _client(decl: A2aAgent, timeout: float) -> httpx.AsyncClient:
    # deferred: httpx costs a run's start ~200 ms; only a call of a remote agent needs it
    import httpx

    from fim.tls import client_context

    return httpx.AsyncClient(
        headers=decl.headers, timeout=timeout, verify=client_context(), follow_redirects=True
    )


async def _card(http: httpx.AsyncClient, decl: A2aAgent) -> dict[str, Any]:
    """The remote agent's card as JSON (raises httpx errors, ValueError when not a card)."""
    response = await http.get(card_url(decl.url))
    response.raise_for_status()
    data = response.json()
    if not isinstance(data, dict):
        raise ValueError("its agent card is not a JSON object")
    _remember_card(decl.url, data)
    return data


def _remember_card(url: str, data: dict[str, Any] | None) -> None:
    said = data.get("description") if data is not None else None
    text = (said[:500] if isinstance(said, str) else "") if data is not None else None
    _CARDS[card_url(url)] = (time.monotonic(), text)
    _CARDS.move_to_end(card_url(url))
    while len(_CARDS) > _KEPT:
        _CARDS.popitem(last=False)


def description(decl: A2aAgent) -> str | None:
    """What the catalogue says of the remote agent: its declared description, else its
    card's when read; None when its card is yet to be read."""
    if decl.description:
        return decl.description
    found = _CARDS.get(card_url(decl.url))
    if found is None or (found[1] is None and time.monotonic() - found[0] > _RETRY_CARD):
        return None
    if found[1] is None:
        return "a remote A2A agent (its card could not be read)"
    return found[1] or "a remote A2A agent (its card has no description)"


async def read_descriptions(decls: list[A2aAgent]) -> None:
    """Read the cards of remote agents with no description yet (`description`), each in at
    most `CARD_SECONDS`; one that cannot be read is described so and asked again later."""
    # deferred: httpx costs a run's start ~200 ms; only a run with a remote agent needs it
    import httpx

    for decl in decls:
        try:
            async with _client(decl, min(decl.timeout, CARD_SECONDS)) as http:
                await _card(http, decl)
        except (httpx.HTTPError, ValueError):
            _remember_card(decl.url, None)


def _error(ctx: RunContext, name: str, text: str) -> ToolResult:
    said = f"Error: remote A2A agent '{name}' {text}"
    return ToolResult(content=ctx.snapshot.mask(said), is_error=True, metadata={"agent": name})


async def ask_remote(ctx: RunContext, name: str, task: str) -> ToolResult:
    """Send `task` to the remote A2A agent `name` and return its answer, or a tool error."""
    decl = ctx.snapshot.project.a2a_agents.get(name)
    if decl is None:
        why = ctx.snapshot.unavailable("a2a", name)
        return _error(ctx, name, f"is unavailable: {why.message if why else 'not declared'}")
    # deferred: httpx costs a run's start ~200 ms; only a call of a remote agent needs it
    import httpx

    try:
        # deferred: the a2a-sdk is the optional extra fim[a2a], loaded at the first call
        from fim.run.remote_call import A2A_ERRORS, exchange
    except ImportError as exc:
        return _error(ctx, name, f"cannot be called: {exc.name} is not installed ({INSTALL})")
    key, sent = context_id(ctx, name, decl)
    try:
        async with _client(decl, decl.timeout) as http:
            answer = await exchange(http, await _card(http, decl), task, sent, decl.timeout)
    except TimeoutError:
        return _error(ctx, name, f"did not answer within its timeout ({decl.timeout:g} s)")
    except httpx.HTTPStatusError as exc:
        status = exc.response.status_code
        hint = " (check its headers: a2a_agents in fim.yaml)" if status in (401, 403) else ""
        return _error(ctx, name, f"refused the call: HTTP {status}{hint}")
    except (httpx.HTTPError, ValueError) as exc:
        return _error(ctx, name, f"could not be called: {type(exc).__name__}: {exc}")
    except A2A_ERRORS as exc:
        return _error(ctx, name, f"could not be called: {type(exc).__name__}: {exc}")
    if answer.context_id and answer.context_id != sent:
        _CONTEXTS[key] = answer.context_id  # the remote assigned its own: continue that one
        while len(_CONTEXTS) > _KEPT:
            _CONTEXTS.popitem(last=False)
    if answer.problem is not None:
        return _error(ctx, name, answer.problem)
    meta = {"agent": name, "remote": "a2a", "context_id": answer.context_id or sent}
    if answer.task_id:
        meta["task_id"] = answer.task_id
    return ToolResult(content=answer.text, metadata=meta)


__all__ = [
    "INSTALL",
    "ask_remote",
    "card_url",
    "context_id",
    "conversation",
    "description",
    "read_descriptions",
    "remote_names",
    "remote_problems",
]
