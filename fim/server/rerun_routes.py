"""`POST /v1/runs/{id}/rerun`: the run's agent on the run's input again, on the snapshot
current now (newcomer-53 #7: "run that same input again and compare" meant copying the
input by hand).

The new run is started as `POST /v1/agents/{name}/runs` starts one (`start_run`): counted
against the caller's key limits (the route's `Op.runs`), streamed, to its end or in the
background as the body asks, and in no session unless the body names one. A key reruns only
a run it may read (its own; an operator key any): another key's run is a 404, as on
`GET /v1/runs/{id}`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.server.agent_routes import not_configured, start_run
from fim.server.bodies import BodyError, RerunBody, RunBody, read_body
from fim.server.http import error, run_scope
from fim.server.sessions import known_agent
from fim.store import get_store
from fim.store.owners import may_read
from fim.store.run_inputs import masked_input, recorded_input

if TYPE_CHECKING:
    from fim.server.api import Api


def rerun_handlers(api: Api) -> dict[str, Any]:
    """The handler of `POST /v1/runs/{run_id}/rerun` (`fim.server.areas.runs`)."""

    async def rerun_run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            raw = await request.body()
            body = await read_body(request, RerunBody) if raw.strip() else RerunBody()
        except BodyError as exc:
            return exc.response()
        store = get_store(api.services)
        record = (
            await store.get_run(run_id)
            if await may_read(store, run_id, run_scope(request))
            else None
        )
        if record is None:  # another key's run: not there
            return error(404, f"unknown run '{run_id}'")
        if record.kind != "agent":
            return error(
                409,
                f"run '{run_id}' is a workflow run: only an agent run is run again",
                f"start the workflow again: POST /v1/workflows/{record.name}/runs",
            )
        text = await recorded_input(store, record)
        if text is None:
            return error(
                409,
                f"run '{run_id}' has no recorded input (it was refused before it started)",
                f"send the input yourself: POST /v1/agents/{record.name}/runs",
            )
        if masked_input(text):  # the mask, not the input, would be run (attack-61 F7)
            return error(
                409,
                f"run '{run_id}' had a secret masked in its stored input (it holds ***): "
                "it is not run again with the mask in place of the secret",
                f"send the input anew: POST /v1/agents/{record.name}/runs",
            )
        snap = api.holder.current
        if not known_agent(snap, record.name):
            return error(
                409,
                f"run '{run_id}' is of agent '{record.name}', which is no longer in the project",
                f"agents: {', '.join(snap.agents)}",
            )
        if (refused := not_configured(snap, record.name)) is not None:
            return refused
        again = RunBody(
            input=text, session_id=body.session_id, stream=body.stream, background=body.background
        )
        return await start_run(api, request, record.name, again)

    return {"rerun_run": rerun_run}


__all__ = ["rerun_handlers"]
