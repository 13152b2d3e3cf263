"""The HTTP API of `fim serve` (Starlette): agents, runs, workflows, approvals, status.

Every request reads `holder.current` once and keeps that snapshot for its whole run, so a
hot reload never changes a request in flight. Secrets never leave: every JSON body and SSE
event is masked as values by `fim.masking` (`fim.server.http.JSONResponse`, `sse`), and
errors are rendered from our own messages, never from request bodies. A session belongs
to the API key that created it; another key is told it does not exist.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from fim import observe
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.errors import FimError
from fim.events import Event, RunFinished
from fim.run.services import Services
from fim.run.sessions import session_key
from fim.server.area import Area, Op
from fim.server.bodies import BodyError, RunBody, read_body
from fim.server.devpage import status_payload
from fim.server.http import (
    AccessLog,
    Guard,
    JSONResponse,
    cancel_on_disconnect,
    error,
    run_scope,
    session_owner,
    sse,
)
from fim.server.openai_errors import error_object, failure, http_error
from fim.server.sessions import UnknownSession, known_agent
from fim.types import Message

if TYPE_CHECKING:
    from fim.store.sessions import Sessions

log = logging.getLogger("fim.server")


class Api:
    def __init__(self, holder: SnapshotHolder, services: Services) -> None:
        self.holder = holder
        self.services = services
        self._sessions: Sessions | None = None
        self.started_at = time.time()
        self.active_runs = 0

    # ------------------------------------------------------------------ status

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def status(self, request: Request) -> Response:
        return JSONResponse(status_payload(self))

    async def agents(self, request: Request) -> Response:
        snap = self.holder.current
        return JSONResponse(
            {
                "agents": [
                    {"name": a.name, "description": a.description, "engine": a.engine}
                    for a in snap.agents.values()
                ]
            }
        )

    async def agent(self, request: Request) -> Response:
        snap = self.holder.current
        name = request.path_params["name"]
        if name not in snap.agents:
            return error(404, f"unknown agent '{name}'", f"agents: {', '.join(snap.agents)}")
        decl = snap.agents[name].model_dump(mode="json", by_alias=True)
        return JSONResponse(snap.masker.value(decl, keys=True))

    # ------------------------------------------------------------------ runs

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
        key = session_key(owner, session)
        found = await self.session_store.load(key)
        if found is None and key != session:
            # kept under its plain name before sessions were per key: its creator goes on
            legacy = await self.session_store.load(session)
            found = legacy if legacy is not None and legacy[0] == owner else None
        if found is None:
            return []
        created_by, history = found
        if created_by != owner:
            raise UnknownSession(f"unknown session '{session}'")
        return history

    async def _conversation(
        self, body: RunBody, owner: str = ""
    ) -> tuple[list[Message], str | None]:
        session = body.session_id
        history = await self.history(session, owner)
        if body.messages:
            history += body.messages
        elif body.input is not None:
            history.append(Message(role="user", content=body.input))
        return history, session

    async def remember(
        self, session: str | None, owner: str, history: list[Message], output: str
    ) -> None:
        if not session:
            return
        # taken meanwhile by another key: save() refuses, never mixing two callers' turns
        turn = [*history, Message(role="assistant", content=output)]
        key = session_key(owner, session)
        await self.session_store.save(key, owner, turn, name=session if key != session else None)

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
        self.active_runs += 1
        kept = [] if trace is None else trace
        live = EventLog(get_store(self.services), run_id, "agent", agent)  # any replica tails it
        final: RunFinished | None = None
        problem = ""
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
                if isinstance(event, RunFinished):
                    final = event
                yield event
        finally:
            self.active_runs -= 1
            status = final.status if final else "cancelled"
            if status == "error":  # one line per failed run, whichever route ran it
                log.warning("run %s of agent '%s' failed: %s", run_id, agent, problem or "error")
            await live.close()
            # the record holds the events only if the log lost some (a failed write)
            await self._persist(run_id, agent, status, final, kept if live.failed else None)

    async def _persist(
        self,
        run_id: str,
        agent: str,
        status: str,
        final: RunFinished | None,
        events: list[dict[str, Any]] | None,
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
                | ({"events_in_log": True} if events is None else {"events": events}),
            )
        except Exception:  # persistence must never fail a run that succeeded
            logging.getLogger("fim.server").exception("could not persist run %s", run_id)

    async def create_run(self, request: Request) -> Response:
        name = request.path_params["name"]
        snap = self.holder.current
        if not known_agent(snap, name):
            return error(404, f"unknown agent '{name}'", f"agents: {', '.join(snap.agents)}")
        owner = session_owner(request, self.holder)
        try:
            body = await read_body(request, RunBody)
            history, session = await self._conversation(body, owner)
        except BodyError as exc:
            return exc.response()
        except UnknownSession as exc:
            return error(404, exc.message)
        if body.background:  # 202 at once; fim.server.background runs or queues it
            # deferred: the queue (procrastinate) loads only for background runs
            from fim.server.background import start_agent_run

            return await start_agent_run(self, name, history, session, owner)
        run_id = uuid.uuid4().hex[:12]
        if body.stream:
            return sse(self._sse_run(name, history, (session, owner), run_id))
        return await self._json_run(request, name, history, (session, owner), run_id)

    async def _sse_run(
        self, name: str, history: list[Message], session: tuple[str | None, str], run_id: str
    ) -> AsyncIterator[Event]:
        async for event in self.events(
            name, history, stream=True, run_id=run_id, session=session[0], owner=session[1]
        ):
            if isinstance(event, RunFinished):
                await self.remember(session[0], session[1], history, event.output)
            yield event

    async def _json_run(
        self,
        request: Request,
        name: str,
        history: list[Message],
        session: tuple[str | None, str],
        run_id: str,
    ) -> Response:
        outcome = await self.run_to_end(request, name, history, run_id, session=session[0])
        if isinstance(outcome, Response):
            return outcome
        final, trace = outcome
        if final.status == "error":  # a failed run is an HTTP error, never a 200 "answer"
            status, body = error_object(failure(trace, final))
            body.update(run_id=run_id, agent=name, status=final.status, events=trace)
            return JSONResponse(body, status_code=status)
        await self.remember(session[0], session[1], history, final.output)
        return JSONResponse(
            {
                "run_id": run_id,
                "agent": name,
                "status": final.status,
                "output": final.output,
                "usage": final.usage.model_dump(),
                "session_id": session[0],
                "events": trace,
            }
        )

    async def list_runs(self, request: Request) -> Response:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store

        try:
            limit = max(1, min(500, int(request.query_params.get("limit", "50"))))
        except ValueError:
            return error(400, "limit must be an integer")
        kind = request.query_params.get("kind")
        owner = run_scope(request, self.holder)  # a keyed caller: its own runs
        records = await get_store(self.services).list_runs(kind=kind, limit=limit, owner=owner)
        return JSONResponse({"runs": [_summary(r) for r in records]})

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
                owner=session_owner(request, self.holder),
            ):
                if isinstance(event, RunFinished):
                    final = event
            return final

        try:
            final = await cancel_on_disconnect(request, consume())
        except FimError as exc:
            return error(500, str(exc))
        if final is None:
            return error(499, "client disconnected; run cancelled")
        return final, trace


def _summary(record: Any) -> dict[str, Any]:
    """A run without its trace, for listings."""
    data = _record_dict(record)
    data.pop("data", None)
    return data


def _record_dict(record: Any) -> dict[str, Any]:
    if is_dataclass(record) and not isinstance(record, type):
        return json.loads(json.dumps(asdict(record), default=str))
    return dict(record)


async def _internal_error(request: Request, exc: Exception) -> Response:
    """Log the traceback; tell the client only that it failed (no secrets, no internals)."""

    logging.getLogger("fim.server").exception("unhandled error on %s", request.url.path)
    return error(500, "internal error; see the server log")


AREAS = (
    "fim.server.areas.status",
    "fim.server.areas.agents",
    "fim.server.areas.runs",
    "fim.server.areas.live",
    "fim.server.areas.openai_compat",
    "fim.server.areas.metrics",
    "fim.server.areas.devpage",
    "fim.server.areas.workflows",
    "fim.server.areas.approvals",
    "fim.server.areas.interop",
    "fim.server.areas.usage",
    "fim.server.areas.sessions",
)
"""The route areas the app is assembled from, one file each (`fim.server.area`), in routing
order (also the order of the OpenAPI document's paths)."""


def load_areas(modules: Sequence[str]) -> list[Area]:
    """The `AREA` of each module; a module without one is an error, never skipped."""
    areas = []
    for name in modules:
        area = getattr(importlib.import_module(name), "AREA", None)
        if not isinstance(area, Area):
            raise TypeError(f"route area module {name} has no AREA = fim.server.area.Area(...)")
        areas.append(area)
    return areas


def create_app(
    holder: SnapshotHolder, services: Services | None = None, areas: Sequence[str] = AREAS
) -> Starlette:
    """Build the ASGI app around a snapshot holder (the reloader swaps its content), from
    the route areas `areas` (module names)."""
    services = services or Services(
        root=holder.current.root,
        state_url=holder.current.project.state,
        providers=CAPABILITIES,
    )

    observe.enable_metrics()
    api = Api(holder, services)
    routes: list[BaseRoute] = []
    operations: dict[tuple[str, str], Op] = {}
    for area in load_areas(areas):
        routes += area.routes(api)
        for key, op in area.operations().items():
            if key in operations:
                raise TypeError(f"route area '{area.name}': {' '.join(key)} is already served")
            operations[key] = op
    # deferred: loading fim.observe.http costs a few ms
    from fim.observe.http import TraceContext

    middleware = [
        Middleware(TraceContext),
        Middleware(AccessLog),
        Middleware(Guard, holder=holder),
    ]
    cors = holder.current.project.server.cors_origins
    if cors:
        middleware.insert(
            2,
            Middleware(
                CORSMiddleware, allow_origins=cors, allow_methods=["*"], allow_headers=["*"]
            ),
        )

    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={Exception: _internal_error, HTTPException: http_error},
    )
    app.state.api = api
    app.state.operations = operations  # what fim.server.openapi documents
    return app
