"""Workflow and approval routes of the HTTP API."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from fim import masking
from fim.errors import FimError
from fim.server.background import requeue_decided, spawn_run
from fim.server.bodies import BodyError, DecisionBody, WorkflowRunBody, read_body
from fim.server.http import Caller, JSONResponse, caller, error, run_scope, session_owner, sse
from fim.server.limits import Busy, Slot, check_parked
from fim.server.queries import ApprovalsQuery, read_query
from fim.server.stopping import until_stop
from fim.store import get_store
from fim.store.approvals import ReservedData, abandoned, already_decided
from fim.store.live import recorded
from fim.store.owners import REVOKED, claimed, may_read, owner_of
from fim.workflows.admission import revoked
from fim.workflows.inputs import required
from fim.workflows.state import KIND

if TYPE_CHECKING:
    from fim.server.api import Api
    from fim.store.records import Approval

log = logging.getLogger("fim.server")


def workflow_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `workflows` area (`fim.server.areas.workflows`)."""

    async def list_workflows(request: Request) -> Response:
        """Every workflow and its inputs; `required` is resolved (an input without a
        default is required), never the declaration's unset null."""
        snap = api.holder.current
        return JSONResponse(
            {
                "workflows": [
                    {
                        "name": w.name,
                        "description": w.description,
                        "inputs": {
                            k: {**v.model_dump(), "required": required(v)}
                            for k, v in w.inputs.items()
                        },
                    }
                    for w in snap.workflows.values()
                ]
            }
        )

    async def run_workflow(request: Request) -> ASGIApp:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.run.preflight import PreflightError
        from fim.workflows.engine import WorkflowEngine

        name = request.path_params["name"]
        snap = api.holder.current
        if name not in snap.workflows:
            return error(
                404, f"unknown workflow '{name}'", f"workflows: {', '.join(snap.workflows)}"
            )
        try:
            body = await read_body(request, WorkflowRunBody)
        except BodyError as exc:
            return exc.response()

        inputs = body.inputs or {}
        owner = session_owner(request)
        store = get_store(api.services)
        run_id = uuid.uuid4().hex[:12]
        try:  # each run may pause at a human node: a place among the key's capped ones
            limits = snap.project.server.key_limits
            parked = await check_parked(store, limits, owner, run_id, name)
        except Busy as exc:
            return exc.response()
        if body.background:  # 202 at once; fim.server.background runs or queues it
            # deferred: the queue (procrastinate) loads only for background runs
            from fim.server.background import start_workflow_run

            accepted = False
            try:
                answer = await start_workflow_run(api, name, inputs, owner, run_id=run_id)
                accepted = answer.status_code == 202
            finally:  # refused (bad inputs, no queue): its place is given back
                if parked is not None and not accepted:
                    await parked.release()
            return answer
        engine = WorkflowEngine(snap, name, api.services, run_id=run_id)
        started = claimed(store, run_id, owner, engine.run(inputs))  # the key's run

        def began() -> bool:
            return engine.state is not None

        if parked is not None:  # a run that never began gives its place back
            started = parked.events(started, began)
        events = recorded(store, run_id, KIND, name, started)
        if body.stream:  # cut by a stopping server: a last `error` event (`until_stop`)
            streamed = sse(until_stop(api, run_id, events))
            return streamed if parked is None else parked.sending(streamed, began)
        trace: list[dict[str, Any]] = []
        try:
            async for event in events:
                trace.append(event.model_dump(mode="json"))
        except PreflightError as exc:  # the server lacks a key or command: not the client's
            return error(503, exc.message, exc.hint)
        except FimError as exc:  # bad inputs name the field (`inputs.amount`)
            return error(400, str(exc), param=getattr(exc, "param", None))
        finally:
            if parked is not None:
                await parked.release(began())
        last = trace[-1] if trace else {}
        if last.get("status") == "failed":
            failed = [e.get("node") for e in trace if e.get("type") == "node_failed"]
            log.warning("workflow run %s of '%s' failed at %s", last.get("run_id"), name, failed)
        return JSONResponse(
            {
                "run_id": last.get("run_id"),
                "workflow": name,
                "status": last.get("status"),
                "outputs": last.get("outputs", {}),
                "events": trace,
            }
        )

    return {"list_workflows": list_workflows, "run_workflow": run_workflow}


def approval_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `approvals` area (`fim.server.areas.approvals`)."""

    async def list_approvals(request: Request) -> Response:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store

        query = read_query(request, ApprovalsQuery)  # an unknown status is a 400
        if isinstance(query, Response):
            return query
        store = get_store(api.services)
        owner = run_scope(request)  # a keyed caller: its own runs' approvals
        status = None if query.status == "all" else query.status
        items = await store.list_approvals(status, agent=query.agent, owner=owner)
        return JSONResponse({"approvals": [a.as_dict() for a in items]})

    async def resolve(request: Request) -> Response:
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store

        try:
            body = await read_body(request, DecisionBody)
        except BodyError as exc:
            if exc.field == "decision":
                exc.hint = 'send {"decision": "approve"} or {"decision": "deny"}'
            return exc.response()
        decision = body.decision
        store = get_store(api.services)
        approval_id = request.path_params["approval_id"]
        current = await store.get_approval(approval_id)
        if current is None or not await may_read(
            store, current.run_id, run_scope(request)
        ):  # another key's run waits on it: not there
            return error(404, f"unknown approval '{approval_id}'")
        if current.status != "pending":
            return undecidable(approval_id, current)
        data = body.data
        if current.kind == "elicitation":  # an MCP server's question: validate the answer
            from fim.mcp.elicitation import content_problem  # deferred: MCP loads on use

            data = dict(data or {})
            if decision == "approve":
                problem = content_problem(current.args.get("schema") or {}, data.get("content"))
                if problem is not None:
                    field, message = problem
                    return error(400, f"data.{field} {message}", param=f"data.{field}")
            elif data.get("action") not in (None, "decline", "cancel"):
                return error(400, "data.action must be decline or cancel", param="data.action")
        if current.kind == "workflow" and await _revoked(api, current.run_id):
            return error(409, f"run '{current.run_id}' was cancelled: {REVOKED}", code="revoked")
        slot = None
        if current.kind == "workflow":  # the decision resumes a run: the decider's to count
            try:
                slot = api.limits.take(session_owner(request))
            except Busy as exc:  # nothing decided: the approval stays pending
                return exc.response()
        by = decider(caller(request.scope), body.by)
        try:
            try:
                resolution = await store.decide_approval(
                    approval_id, decision == "approve", by=by, data=data
                )
            except ReservedData as exc:  # nothing decided
                return error(400, exc.message, exc.hint, param=f"data.{exc.field}")
            approval = resolution.approval
            if approval is None:
                return error(409, f"approval '{approval_id}' could not be resolved")
            if not resolution.changed:  # expired, or decided by another request meanwhile
                # (the same decision too): only the request that decided it resumes the run
                return undecidable(approval_id, approval)
            resumed = None
            if current.kind == "workflow":
                # the run `may_read` allowed, as the approval was stored: never the data
                run_id = current.run_id
                if await requeue_decided(api, run_id):  # a worker continues it
                    resumed = run_id
                else:
                    approve = decision == "approve"
                    resumed = _resume_workflow(api, current, approve, data, slot, by)
                    slot = None  # the resumed run releases it when it ends
        finally:
            if slot is not None:
                slot.release()
        return JSONResponse({"approval": approval.as_dict(), "resumed_run": resumed})

    return {"list_approvals": list_approvals, "resolve": resolve}


async def _revoked(api: Api, run_id: str) -> bool:
    """Whether paused run `run_id` was claimed by a key since removed from fim.yaml. It is
    then recorded `cancelled` and what it waits on denied (`revoked`), before a decision
    resumes it: a revoked key must not spend when someone else (an operator, on SQLite
    where the run continues in this process) decides its approval. A queued run's worker
    checks the same (`advance`); checking here answers the decider the same on both."""
    store = get_store(api.services)
    owner = await owner_of(store, run_id) or ""
    return await revoked(store, api.holder.current.project.server, run_id, owner) is not None


def undecidable(approval_id: str, current: Approval) -> JSONResponse:
    """409 for an approval that is no longer pending, or that another request decided
    while this one was deciding it: what it is and who made it so (an abandoned one says
    why). Never a 200 for the decider that lost, even when both asked the same: a 200
    once also resumed the run, and two replicas ran the nodes after one denial twice."""
    gone = abandoned(current)
    if gone is not None:
        return error(409, *gone, code="approval_abandoned")
    return error(
        409,
        already_decided(current),
        f"approval '{approval_id}' was decided once; `GET /v1/approvals?status=all` shows it",
        code="already_decided",
    )


def decider(who: Caller, note: str | None) -> str:
    """Who decided an approval, as `resolved_by` records it: the key the Guard verified,
    `api:key:<hash>` or `api:operator:<hash>` (the first 12 hex digits of the key's hash,
    never the key), or `api` on a server without keys. The body's free-text `by` is the
    decider's own note, kept after that in parentheses: it was once recorded alone, and
    any key could sign its decisions as someone else."""
    name = f"api:{'operator' if who.operator else 'key'}:{who.key[:12]}" if who.key else "api"
    masker = masking.known()  # masked whole before it is squeezed and cut (`Masker.head`)
    text = " ".join(masker.text(note or "").split())  # one line: no forged second entry
    return masker.head(f"{name} ({text})", 200)[0] if text else name


def _resume_workflow(
    api: Api,
    approval: Approval,
    approved: bool,
    data: dict[str, Any] | None,
    slot: Slot | None,
    by: str,
) -> str:
    """Resume a paused workflow in the background; its progress is in GET /v1/runs/{id}.
    `approval` is as it was stored before the decision: its run, workflow and node are the
    ones continued (a decision's `data` is the node's input, never where it goes). `slot`,
    the decider's `server.key_limits` count, is held until the run stops again."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.engine import WorkflowEngine

    info = approval.data or {}
    run_id = approval.run_id
    workflow, node = info.get("workflow") or approval.agent, info.get("node")
    engine = WorkflowEngine(api.holder.current, str(workflow), api.services)

    async def drive() -> None:
        try:
            store = get_store(api.services)
            events = engine.resume(run_id, approved, data, node=str(node) if node else None, by=by)
            async for _event in recorded(store, run_id, KIND, engine.name, events):
                pass
        except Exception:
            log.exception("resuming workflow run %s failed", run_id)
        finally:
            if slot is not None:
                slot.release()

    spawn_run(drive(), run_id, api)  # in the background: a cancel stops it
    return run_id
