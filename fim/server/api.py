"""`Api`: the server's state (the snapshot holder, the services, the runs in flight) and the
one way every API surface runs an agent: the caller's session history, the run itself with
its record and event log, the conversation's next turn.

Its own module because every surface builds on it (the native routes of
`fim.server.agent_routes`, the OpenAI-compatible, A2A and MCP surfaces, `fim mcp` over
stdio), while none of them needs the app assembly of `fim.server.app`. Each API key names
its own sessions (`fim.run.sessions`): another key's of the same name is not there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.build.reload import SnapshotHolder
from fim.errors import FimError
from fim.events import ErrorEvent, Event, Notice, RunFinished
from fim.masking import known
from fim.observe.vcs import served_commit
from fim.project_frames import raised_line
from fim.run.services import Services
from fim.run.sessions import session_key
from fim.run_summary import run_summary
from fim.server import refusals
from fim.server.http import cancel_on_disconnect, error, session_owner
from fim.server.limits import KeyLimiter
from fim.server.sessions import find_session
from fim.server.stopping import SERVER_STOPPED, called_tools, shutting_down
from fim.tasks import shielded
from fim.types import Message

if TYPE_CHECKING:
    from fim.store.health import StoreProbe
    from fim.store.sessions import Sessions

log = logging.getLogger("fim.server")


class Api:
    """The server's state and its agent runs (see the module docstring)."""

    def __init__(self, holder: SnapshotHolder, services: Services) -> None:
        self.holder = holder
        self.services = services
        self._sessions: Sessions | None = None
        self.started_at = time.time()
        self.active_runs = 0
        self.active_by_owner: Counter[str] = Counter()
        """Runs going on per owner (key hash): what `GET /v1/status` tells a tenant."""
        self.limits = KeyLimiter(lambda: holder.current.project.server.key_limits)
        """Each key's runs going and started this minute (`server.key_limits`)."""
        self._store_probe: StoreProbe | None = None
        self.one_of_many = False
        """One of `fim serve --workers N`'s processes: a client's next request may reach
        another, so `/mcp` keeps no sessions (`fim.server.mcp_sessions`)."""
        self.stopping = False
        """The server is stopping (`fim.server.stopping.begin`): a run cut now was cut by
        the stop, not by its client."""

    @property
    def store_probe(self) -> StoreProbe:
        """Whether the state store answers, for `/readyz` and `/v1/status`
        (`fim.store.health.StoreProbe`: one query per few seconds, however often asked)."""
        if self._store_probe is None:
            # deferred: loading fim.store costs a few ms
            from fim.store import get_store
            from fim.store.health import StoreProbe

            self._store_probe = StoreProbe(lambda: get_store(self.services))
        return self._store_probe

    @property
    def session_store(self) -> Sessions:
        """Sessions live in the state store, so every replica on it sees them."""
        if self._sessions is None:
            # deferred: loading fim.store costs a few ms
            from fim.store import get_store
            from fim.store.sessions import Sessions

            self._sessions = Sessions(get_store(self.services))
        return self._sessions

    async def history(self, session: str | None, owner: str) -> list[Message]:
        """The conversation so far of this caller's session `session` (each key names its
        own sessions, `fim.run.sessions`); on a server without keys, a session a key
        created is reported as unknown (404), so its history never reaches this caller."""
        if not session:
            return []
        found = await find_session(self.session_store, owner, session)
        return found[1] if found is not None else []

    async def remember(
        self, session: str | None, owner: str, history: list[Message], output: str
    ) -> None:
        if not session:
            return
        # taken meanwhile by another key: save() refuses, never mixing two callers' turns
        turn = [*history, Message(role="assistant", content=output)]
        key = session_key(owner, session)
        # the run is over and recorded: a client leaving now must not lose its turn
        await shielded(self.session_store.save(key, owner, turn, name=session))

    async def events(
        self,
        agent: str,
        history: list[Message],
        *,
        stream: bool,
        run_id: str,
        overrides: Any = None,
        session: str | None = None,
        trace: list[dict[str, Any]] | None = None,
        owner: str = "",
    ) -> AsyncIterator[Event]:
        """Run one request on the snapshot current *now*, persisting the run at the end.
        `session` is the conversation it continues: its session budgets count it. `trace`,
        when given, receives each event but tokens as JSON (dumped once, here). `owner`,
        the caller's key hash (`session_owner`), is recorded first: only that key reads
        the run back (`fim.store.owners`).

        The events are stored once, in the run's event log (which any replica tails while
        it runs); the run's record keeps its status and output, and `GET /v1/runs/{id}`
        reads the events from the log (storing them in the record too wrote, masked and
        JSON-encoded every event a second time). If the log lost a write, the record
        keeps them all instead."""
        # deferred: loading fim.engines.dag costs hundreds of ms
        from fim.run.agent import run_agent
        from fim.store import get_store
        from fim.store.live import EventLog

        snapshot = self.holder.current
        kept = [] if trace is None else trace
        live = EventLog(get_store(self.services), run_id, "agent", agent)  # any replica tails it
        final: RunFinished | None = None
        problem = ""
        # the HTTP routes that start runs took the slot before answering (`admitting`);
        # an MCP call or an A2A task takes it here: over a limit, `Busy` before anything
        slot = self.limits.for_run(owner)
        self.active_runs += 1
        self.active_by_owner[owner] += 1
        try:
            async for event in run_agent(
                snapshot,
                agent,
                history,
                services=self.services,
                stream=stream,
                run_id=run_id,
                overrides=overrides,
                session=session_key(owner, session),
                owner=owner,
            ):
                dumped = event.model_dump(mode="json")
                live.add(dumped)
                if event.type == "run_started":  # the record exists before anyone hears of it
                    await live.flush()
                if event.type != "token":
                    kept.append(dumped)
                if event.type == "error":
                    problem = f"{event.kind}: {event.message}"
                elif (raised := raised_line(event)) is not None:  # project code raised
                    log.warning("run %s of agent '%s': %s", run_id, agent, raised)
                if isinstance(event, RunFinished):
                    final = event
                yield event
        except FimError as exc:  # refused (a skill that failed to load) or failed on purpose
            if not problem:  # its reason on the run, as its client heard it (newcomer-53 #4)
                refusal = ErrorEvent(
                    run_id=run_id, message=known().text(str(exc)), kind=_kind(kept)
                )
                problem = f"{refusal.kind}: {refusal.message}"
                dumped = refusal.model_dump(mode="json")
                live.add(dumped)
                kept.append(dumped)
            raise
        except Exception:
            problem = problem or "the run ended in an internal error (see the server log)"
            raise
        finally:
            self.active_runs -= 1
            self.active_by_owner[owner] -= 1
            if not self.active_by_owner[owner]:
                del self.active_by_owner[owner]
            if slot is not None:
                slot.release()
            status = final.status if final else ("error" if problem else "cancelled")
            if status == "error":  # one line per failed run, whichever route ran it
                log.warning("run %s of agent '%s' failed: %s", run_id, agent, problem or "error")
            # shielded: a client that left a stream (Starlette), an MCP call cancelled by
            # `notifications/cancelled` or a stdio client gone cancel through an anyio
            # scope, which cancels every await of this `finally` again; unshielded, the
            # run kept its events but never got its record (attack-33 #1)
            ended = (status, final, kept, session, served_by(snapshot))
            await shielded(self._close(live, run_id, agent, *ended))

    async def _close(
        self,
        live: Any,
        run_id: str,
        agent: str,
        status: str,
        final: RunFinished | None,
        kept: list[dict[str, Any]],
        session: str | None = None,
        served: dict[str, str] | None = None,
    ) -> None:
        """The run's event log flushed, then its record written (one shielded task);
        `served`: the snapshot (and commit) it ran on, as a background run's record says."""
        await live.close()
        # the record holds the events only if the log lost some (a failed write)
        events = kept if live.failed else None
        summary = run_summary(kept) | (served or {})
        await self._persist(run_id, agent, status, final, events, session, summary)

    async def _persist(
        self,
        run_id: str,
        agent: str,
        status: str,
        final: RunFinished | None,
        events: list[dict[str, Any]] | None,
        session: str | None = None,
        summary: dict[str, Any] | None = None,
    ) -> None:
        try:
            # deferred: optional dependency, absent in some installs
            from fim.store import get_store

            store = get_store(self.services)
            await store.put_run(
                run_id,
                "agent",
                agent,
                status,
                {"output": final.output if final else None}
                | ({"events_in_log": True} if events is None else {"events": events})
                | ({"error": SERVER_STOPPED} if status == "cancelled" and self.stopping else {})
                # the conversation it was a turn of, as its caller named it (the dev page
                # shows it and opens it in the Chat: newcomer-53 #16)
                | ({"session_id": session} if session else {})
                | (summary or {}),  # tool errors, hook blocks, input (newcomer-53 #7)
            )
        except Exception:  # persistence must never fail a run that succeeded
            logging.getLogger("fim.server").exception("could not persist run %s", run_id)

    async def run_to_end(
        self,
        request: Request,
        name: str,
        history: list[Message],
        run_id: str,
        overrides: Any = None,
        session: str | None = None,
    ) -> tuple[RunFinished, list[dict[str, Any]]] | Response:
        """Run to completion and return the final event and the trace; the run is cancelled
        if the client goes away. A failure comes back as an error Response."""
        trace: list[dict[str, Any]] = []  # stream=False: no tokens, every event is in it

        async def consume() -> RunFinished | None:
            final = None
            async for event in self.events(
                name,
                history,
                stream=False,
                run_id=run_id,
                overrides=overrides,
                session=session,
                trace=trace,
                owner=session_owner(request),
            ):
                if isinstance(event, RunFinished):
                    final = event
                elif (approval := waiting_on(event)) is not None:  # the caller sees nothing
                    log.warning(
                        "%s %s: run %s waits for approval %s; the request is held until it "
                        "is decided (POST /v1/approvals/%s) or expires",
                        request.method,
                        request.url.path,
                        run_id,
                        approval,
                        approval,
                    )
            return final

        try:
            final = await cancel_on_disconnect(request, consume())
        except FimError as exc:  # refused before it started: the server's configuration
            return refusals.refusal(exc) if refusals.refused(trace) else error(500, str(exc))
        except asyncio.CancelledError:  # the stopping server cut the request: say so
            if not self.stopping:
                raise
            return shutting_down(run_id, called_tools(trace))
        if final is None:  # cancelled: by the server's stop (a 503) or the client
            if self.stopping:  # retried by the SDKs only if no tool ran (`shutting_down`)
                return shutting_down(run_id, called_tools(trace))
            return error(499, "client disconnected; run cancelled")
        return final, trace


def served_by(snapshot: Any) -> dict[str, str]:
    """What a run's record says of the snapshot it ran on: `snapshot` (its version) and,
    from a git checkout, `commit`, so `GET /v1/runs?snapshot=` finds a rollout's runs
    (newcomer-52 #8)."""
    commit = served_commit(snapshot)
    return {"snapshot": snapshot.version} | ({"commit": commit} if commit else {})


def _kind(kept: list[dict[str, Any]]) -> str:
    """An error raised before the run's first event refused the run (`refused`: a skill
    that failed to load, a key problem, an unknown model role); after it, the run failed."""
    return "run_error" if kept else "refused"


def waiting_on(event: Event) -> str | None:
    """The approval a run starts waiting on (a `confirm` hook's notice), or None: what a
    held request tells its caller (an SSE comment) or the operator (a log line), since a
    non-streamed answer cannot say it before the decision (newcomer-49 #3)."""
    if not isinstance(event, Notice):
        return None
    approval = event.data.get("approval_id")
    if not isinstance(approval, str) or not approval.isprintable():
        return None  # one line of a log or a stream: never a line break in it
    return approval
