"""The local development page of `fim serve` and the public routes it needs.

The page (`/`, assets under `/static/`, the API reference at `/docs`) is plain HTML, CSS and
a vanilla ES module shipped inside the package: no build step, no CDN, works offline. It
talks to the server only through the public HTTP API and its SSE streams, so everything it
shows a client can get too. The routes added here for it are ordinary API routes:

- `GET /v1/agents/{name}/prompt`: what `fim show agent NAME --prompt` prints;
- `GET /v1/workflows/{name}/graph`: the DAG of `fim graph`, as JSON (nodes with a layer
  for drawing, edges) plus the Mermaid text;
- `GET /v1/evals`, `POST /v1/evals/{suite}/runs`: eval suites and a run of one (replay by
  default), reported as `fim eval --json` reports it;
- `GET /v1/status/stream`: the status of `/v1/status` as server-sent events, one whenever
  it changes (a reload, a reload error, runs starting and ending).

The page assets are public (they hold no data); every data route stays behind the bearer
key, which the page asks for and keeps in the tab's session storage.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles

from fim.build.reload_health import unavailable_agents
from fim.errors import FimError
from fim.masking import known
from fim.server.bodies import BodyError, EvalRunBody, read_body
from fim.server.http import JSONResponse, error, run_scope
from fim.server.streams import followed
from fim.version import fim_version

if TYPE_CHECKING:
    from fim.server.api import Api

STATIC = Path(__file__).parent / "static"

STATUS_STREAM_SECONDS = 25.0
"""A status stream ends after this long and the page reconnects: a long-lived stream
never holds up a graceful shutdown for more than this."""

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""The page runs only its own script: model output rendered into it cannot run code."""


def status_payload(api: Api, owner: str | None = None) -> dict[str, Any]:
    """The body of `GET /v1/status` and of each event of its stream. For a tenant (`owner`,
    its key's hash: `fim.server.http.run_scope`) the runs going on are its own, and a
    failed reload is said without its problems: they quote the project's files, an
    operator's business. So is why the state store does not answer: its text names the
    store's host, database and role (attack-44 F3), so a tenant gets only whether it does."""
    h = api.holder
    failed: dict[str, Any] | None = None
    if h.errors:
        failed = {"at": h.error_at, "problems": [], "text": _FAILED_FOR_TENANTS}
        if owner is None:
            failed["problems"] = [p.as_dict() for p in h.errors]
            failed["text"] = "\n".join(str(p) for p in h.errors)
    store = dict(api.store_probe.last)  # the last probe's answer (`/readyz`)
    if owner is not None:
        store = {"ok": store["ok"]}
    elif store.get("error"):  # a secret the driver's words quote stays out too
        store["error"] = h.current.masker.text(store["error"])
    return {
        "project": h.current.project.name,
        "snapshot": h.current.version,
        "loaded_at": h.current.loaded_at,
        "reloads": h.reloads,
        "active_runs": api.active_runs if owner is None else api.active_by_owner[owner],
        "pid": os.getpid(),  # which worker of `fim serve --workers N` answered
        "fim_version": fim_version(),  # during a rolling upgrade: which pods are new
        "last_reload_error": failed,
        "unavailable": _unavailable(h.current, owner),
        "store": store,
    }


def _unavailable(snapshot: Any, owner: str | None) -> list[dict[str, Any]]:
    """The agents of the snapshot that cannot run, with why (newcomer-53 #5); a tenant
    hears which, not the project's files that say why (as for a failed reload)."""
    found = unavailable_agents(snapshot)
    if owner is not None:
        return [{"agent": u.agent, "reason": _UNAVAILABLE_FOR_TENANTS} for u in found]
    return [snapshot.masker.value(u.as_dict()) for u in found]


_FAILED_FOR_TENANTS = "the project's last change failed to load; an operator key sees why"
_UNAVAILABLE_FOR_TENANTS = "this agent cannot run on the loaded project; an operator key sees why"


def _page(name: str) -> Response:
    response = FileResponse(STATIC / name, media_type="text/html")
    response.headers["Content-Security-Policy"] = CSP
    response.headers["Cache-Control"] = "no-cache"
    return response


def devpage_handlers(api: Api) -> dict[str, Any]:
    """The page, its assets, the OpenAPI document and the API routes the page needs (the
    `devpage` area, `fim.server.areas.devpage`)."""
    # deferred: loading fim.server.responses costs hundreds of ms
    from fim.server.openapi import openapi_document

    async def index(request: Request) -> Response:
        return _page("index.html")

    async def docs(request: Request) -> Response:
        return _page("docs.html")

    async def favicon(request: Request) -> Response:
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(request.app, api.holder.current.project.name))

    async def prompt(request: Request) -> Response:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.run.preflight import PreflightError
        from fim.run.prompt_report import prompt_report

        snap = api.holder.current
        name = request.path_params["name"]
        if name not in snap.agents:
            return error(404, f"unknown agent '{name}'", f"agents: {', '.join(snap.agents)}")
        try:
            text = await prompt_report(snap, name, api.services)
        except PreflightError as exc:
            return error(503, exc.message, exc.hint)
        except FimError as exc:
            return error(400, str(exc))
        return JSONResponse({"agent": name, "snapshot": snap.version, "text": text})

    async def graph(request: Request) -> Response:
        snap = api.holder.current
        name = request.path_params["name"]
        if name not in snap.workflows:
            return error(
                404, f"unknown workflow '{name}'", f"workflows: {', '.join(snap.workflows)}"
            )
        return JSONResponse(workflow_graph(snap, name))

    async def list_evals(request: Request) -> Response:
        snap = api.holder.current
        return JSONResponse(
            {
                "suites": [
                    {
                        "name": s.name,
                        "description": s.description,
                        "agent": s.agent,
                        "workflow": s.workflow,
                        "threshold": s.threshold,
                        "cases": [c.name for c in s.cases],
                    }
                    for s in snap.evals.values()
                ]
            }
        )

    async def run_eval(request: Request) -> Response:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.eval.report import json_report
        from fim.eval.runner import EvalRunner

        snap = api.holder.current
        if run_scope(request) is not None:
            # an eval runs the project's agents without their hooks (as `fim eval` does),
            # calls live models or writes cassettes into the project on request, and its
            # runs belong to no key: an operator's tool, not a tenant's
            return error(
                403,
                "running an eval needs an operator key on a server with keys",
                "add the key to server.operator_keys, or run `fim eval` in the checkout",
            )
        suite = request.path_params["suite"]
        if suite not in snap.evals:
            return error(404, f"unknown eval suite '{suite}'", f"suites: {', '.join(snap.evals)}")
        try:
            body = await read_body(request, EvalRunBody)
        except BodyError as exc:
            return exc.response()
        runner = EvalRunner(
            snap, mode=body.mode, suites=[suite], patterns=body.cases, with_hooks=body.hooks
        )
        try:
            report = await runner.run()
        except FimError as exc:
            return error(400, str(exc))
        return JSONResponse(json_report(report))

    async def status_stream(request: Request) -> Response:
        return followed(api, _status_events(api, run_scope(request)))  # ends at a stop's cut

    return {
        "index": index,
        "docs": docs,
        "favicon": favicon,
        "openapi": openapi,
        "static": StaticFiles(directory=STATIC),
        "status_stream": status_stream,
        "prompt": prompt,
        "graph": graph,
        "list_evals": list_evals,
        "run_eval": run_eval,
    }


async def _status_events(
    api: Api,
    owner: str | None = None,
    *,
    interval: float = 0.25,
    lifetime: float = STATUS_STREAM_SECONDS,
) -> AsyncIterator[bytes]:
    """`event: status` now and whenever the status changes; a comment line every few
    seconds keeps proxies from closing an idle stream."""

    loop = asyncio.get_running_loop()
    end = loop.time() + lifetime
    last = ""
    quiet = 0.0
    while loop.time() < end:
        payload = status_payload(api, owner)
        text = json.dumps(known().value(payload), ensure_ascii=False)
        if text != last:
            last, quiet = text, 0.0
            yield f"event: status\ndata: {text}\n\n".encode()
        elif quiet >= 10.0:
            quiet = 0.0
            yield b": keep-alive\n\n"
        await asyncio.sleep(interval)
        quiet += interval


def workflow_graph(snapshot: Any, name: str) -> dict[str, Any]:
    """The DAG of `fim graph` as JSON: each node with its type and layer (the length of the
    longest path into it, so a drawing puts every node right of what it needs), the edges,
    and the Mermaid text `fim graph` prints."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.graph import edges, incoming, mermaid

    decl = snapshot.workflows[name]
    into = incoming(decl)
    layer: dict[str, int] = {}
    for _ in range(len(decl.nodes) + 1):  # a fixpoint; compiled workflows have no cycles
        changed = False
        for node_id in decl.nodes:
            depth = max((layer.get(e.source, 0) + 1 for e in into[node_id]), default=0)
            if layer.get(node_id) != depth:
                layer[node_id], changed = depth, True
        if not changed:
            break
    return {
        "workflow": name,
        "description": decl.description,
        "inputs": {k: v.model_dump(mode="json") for k, v in decl.inputs.items()},
        "nodes": [
            {"id": node_id, "type": node.type, "layer": layer.get(node_id, 0)}
            for node_id, node in decl.nodes.items()
        ],
        "edges": [{"source": e.source, "target": e.target, "label": e.label} for e in edges(decl)],
        "mermaid": mermaid(decl, name),
    }
