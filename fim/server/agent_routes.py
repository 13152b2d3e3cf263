"""The handlers of the native API's first route areas: status (`/healthz`, `/readyz`,
`/v1/status`), agents (`/v1/agents`, one agent's declaration) and agent runs (start one,
list them).

Its own module so the route handlers sit apart from what they run through (`fim.server.api`:
sessions, the run and its record, shared with every other surface) and from the app's
assembly (`fim.server.app`). Every request reads `api.holder.current` once and keeps that
snapshot for its whole run, so a hot reload never changes a request in flight.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.events import Event, RunFinished
from fim.run.auto import AUTO, auto_agent
from fim.server.bodies import BodyError, RunBody, read_body
from fim.server.devpage import status_payload
from fim.server.http import JSONResponse, error, run_scope, session_owner, sse
from fim.server.openai_errors import error_object, failure, run_failed
from fim.server.queries import RunsQuery, read_query
from fim.server.refusals import NO_RETRY
from fim.server.session_repeat import conversation
from fim.server.sessions import UnknownSession, known_agent
from fim.server.stopping import until_stop
from fim.types import Message

if TYPE_CHECKING:
    from fim.server.api import Api


def status_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `status` area (`fim.server.areas.status`): `/healthz` is
    liveness (the process answers); `/readyz` readiness (a snapshot is loaded and the state
    store answered a query within `PROBE_EVERY` seconds, `Api.store_probe`),
    so an orchestrator sends no traffic to a replica whose every run would fail."""

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def readyz(request: Request) -> Response:
        ok, _ = await api.store_probe.state()
        body: dict[str, Any] = {"ok": ok, "snapshot": api.holder.current.version}
        if not ok:  # anyone may ask: why in general; an operator's GET /v1/status says more
            body["reason"] = "the state store does not answer (see GET /v1/status, the log)"
        elif not api.holder.current.root.is_dir():  # its files are gone (git-sync removed
            ok, body["ok"] = False, False  # the revision): its runs would fail
            body["reason"] = "the served project's files are gone (see GET /v1/status, the log)"
        return JSONResponse(body, status_code=200 if ok else 503)

    async def status(request: Request) -> Response:
        await api.store_probe.state()  # fresh enough: the payload shows its answer
        return JSONResponse(status_payload(api, run_scope(request)))

    return {"healthz": healthz, "readyz": readyz, "status": status}


def agent_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `agents` area (`fim.server.areas.agents`)."""

    async def agents(request: Request) -> Response:
        snap = api.holder.current
        return JSONResponse(
            {
                "agents": [
                    {"name": a.name, "description": a.description, "engine": a.engine}
                    for a in snap.agents.values()
                ]
            }
        )

    async def agent(request: Request) -> Response:
        snap = api.holder.current
        name = request.path_params["name"]
        if name not in snap.agents:
            return error(404, f"unknown agent '{name}'", f"agents: {', '.join(snap.agents)}")
        decl = snap.agents[name].model_dump(mode="json", by_alias=True)
        return JSONResponse(snap.masker.value(decl, keys=True))

    return {"agents": agents, "agent": agent}


def run_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `runs` area (`fim.server.areas.runs`)."""

    async def create_run(request: Request) -> Response:
        name = request.path_params["name"]
        snap = api.holder.current
        if not known_agent(snap, name):
            return error(404, f"unknown agent '{name}'", f"agents: {', '.join(snap.agents)}")
        if (refused := not_configured(snap, name)) is not None:
            return refused
        try:
            body = await read_body(request, RunBody)
        except BodyError as exc:
            return exc.response()
        return await start_run(api, request, name, body)

    async def list_runs(request: Request) -> Response:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store

        query = read_query(request, RunsQuery)
        if isinstance(query, Response):
            return query
        kind = "agent" if query.agent is not None else query.kind
        owner = run_scope(request)  # a keyed caller: its own runs
        records = await get_store(api.services).list_runs(
            kind=kind,
            limit=query.limit,
            owner=owner,
            status=query.status,
            name=query.agent,
            has_errors=query.has_errors,
            snapshot=query.snapshot,
        )
        return JSONResponse({"runs": [_summary(r) for r in records]})

    return {"create_run": create_run, "list_runs": list_runs}


async def start_run(api: Api, request: Request, name: str, body: RunBody) -> Response:
    """Run agent `name` (known, its model configured) as `body` asks, for the caller of
    `request`: streamed, to its end, or in the background. `POST /v1/agents/{name}/runs`
    and `POST /v1/runs/{id}/rerun` (`fim.server.rerun_routes`) alike."""
    owner = session_owner(request)
    try:
        history, session = await _conversation(api, body, owner)
    except BodyError as exc:
        return exc.response()
    except UnknownSession as exc:
        return error(404, exc.message)
    if body.background:  # 202 at once; fim.server.background runs or queues it
        # deferred: the queue (procrastinate) loads only for background runs
        from fim.server.background import start_agent_run

        return await start_agent_run(api, name, history, session, owner)
    run_id = uuid.uuid4().hex[:12]
    if body.stream:  # cut by a stopping server: a last `error` event (`until_stop`)
        run = _sse_run(api, name, history, (session, owner), run_id)
        return sse(until_stop(api, run_id, run), refusable=True)  # refused before it: a 503
    return await _json_run(api, request, name, history, (session, owner), run_id)


def not_configured(snapshot: Any, name: str) -> Response | None:
    """A 503 for a run certain to fail because the server lacks the agent's model API key
    (fim serve warns at start which agents do), before anything runs or is recorded: the
    server's configuration, not the client's request nor a failing model (502), and marked
    not to be retried, so a client does not record three failed runs of one request.
    `auto` is checked on its own model (the `general` role) like any agent: `/v1/models`
    lists it, so an SDK user tries it; the agents it hands tasks to are checked when they
    run."""
    agent = snapshot.agents.get(name)
    if agent is None and name == AUTO:
        agent = auto_agent(snapshot)
    if agent is None:
        return None
    # deferred: loading fim.run costs hundreds of ms on the first request only
    from fim.errors import RunError
    from fim.run.preflight import key_problem

    try:
        problem = key_problem(snapshot.model_settings(agent.model))
    except RunError:  # an unknown role: the run reports it
        return None
    if problem is None:
        return None
    response = error(
        503,
        f"agent '{name}' cannot run on this server: {problem.message}; nothing ran",
        problem.hint,
        code="model_not_configured",
    )
    response.headers.update(NO_RETRY)
    return response


async def _conversation(
    api: Api, body: RunBody, owner: str = ""
) -> tuple[list[Message], str | None]:
    session = body.session_id
    history = await api.history(session, owner)
    if body.messages:  # what repeats the session's history is not new (newcomer-54 #2)
        history = conversation(history, body.messages)
    elif body.input is not None:
        history.append(Message(role="user", content=body.input))
    return history, session


async def _sse_run(
    api: Api, name: str, history: list[Message], session: tuple[str | None, str], run_id: str
) -> AsyncIterator[Event]:
    async for event in api.events(
        name, history, stream=True, run_id=run_id, session=session[0], owner=session[1]
    ):
        if isinstance(event, RunFinished):
            await api.remember(session[0], session[1], history, event.output)
        yield event


async def _json_run(
    api: Api,
    request: Request,
    name: str,
    history: list[Message],
    session: tuple[str | None, str],
    run_id: str,
) -> Response:
    outcome = await api.run_to_end(request, name, history, run_id, session=session[0])
    if isinstance(outcome, Response):
        return outcome
    final, trace = outcome
    if final.status == "error":  # a failed run is an HTTP error, never a 200 "answer"
        status, body = error_object(failure(trace, final))
        body.update(run_id=run_id, agent=name, status=final.status, events=trace)
        return run_failed(status, body, trace)
    await api.remember(session[0], session[1], history, final.output)
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


SUMMARY_FIELDS = ("tool_errors", "hook_blocks", "input")
"""What a listed run keeps of its record's data (`fim.run_summary`): a run that ended
before they were recorded has none of them."""


def _summary(record: Any) -> dict[str, Any]:
    """A run without its trace, for listings: its tool errors, hook blocks and the first
    line of its input when its record has them (newcomer-53 #7)."""
    data = _record_dict(record)
    state = data.pop("data", None) or {}
    return data | {key: state[key] for key in SUMMARY_FIELDS if key in state}


def _record_dict(record: Any) -> dict[str, Any]:
    if is_dataclass(record) and not isinstance(record, type):
        return json.loads(json.dumps(asdict(record), default=str))
    return dict(record)
