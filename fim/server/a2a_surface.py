"""fim as an A2A agent (the Agent2Agent protocol, through the `a2a-sdk` server side).

- `GET /.well-known/agent-card.json`: the project's card; its skills are the agents, and its
  endpoint is the only agent, or the `auto` agent (delegation across them) when several
  (one that can run when `auto` cannot: `fim.server.a2a_cards`);
- `GET /a2a/{agent}/.well-known/agent-card.json`: one agent's card, a skill from its
  description whose tags are its tools. The cards need no key, and declare the bearer
  scheme when the server has keys;
- `POST /a2a/{agent}`: JSON-RPC: A2A 1.0 `SendMessage` / `SendStreamingMessage` and the
  0.3 names `message/send` / `message/stream` (the SDK's v0.3 compatibility), plus task
  get/cancel.

A message runs through `Api.events` (the HTTP API's run entry point: hooks, persistence),
so an A2A call is one more surface of the same runs. The A2A `contextId` is the fim session
(`a2a:<contextId>`), kept per API key like every session (`fim.run.sessions`); the SDK's
task store belongs to the key that created each task. Each run event becomes a `working`
status update (streamed by `message/stream`) whose metadata carries it, and whose message
says the answer, a tool call, a progress line (`fim.server.a2a_progress`); a run waiting on
an approval is `input-required` until it is decided; a quiet stream gets an SSE comment
every `KEEPALIVE` seconds. The answer is the task's artifact, sent once as its own last
chunk, and the final status' metadata the run's end. Everything sent is masked.

A stopping server cuts an A2A run as it cuts its other streamed runs (`until_stop`, a
second before its bound): the task fails with the cut's message, its metadata the
`server_shutting_down` error event. sse_starlette used to end every A2A stream the moment
SIGTERM came, with no final event, while the run went on calling tools with nobody
reading until uvicorn's bound cut it with a traceback (attack-47 F4): the streams now
live until their run ends or is cut (`STREAM_GRACE`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

import pydantic_core
from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb
from sse_starlette.sse import EventSourceResponse
from starlette.routing import Route, Router

from fim.errors import FimError
from fim.events import RunFinished
from fim.masking import known
from fim.schema_check import MAX_NESTING, nested_deeper
from fim.server.a2a_cancel import Handler, Here
from fim.server.a2a_cards import agent_card
from fim.server.a2a_progress import KEEPALIVE, progress, said, waiting
from fim.server.a2a_refusals import out_of_range, quiet_refusals
from fim.server.a2a_tasks import StoredTaskStore
from fim.server.api import waiting_on
from fim.server.json_keys import duplicate_key
from fim.server.public import CARD as CARD_PATH
from fim.server.replies import jsonrpc_error
from fim.server.sessions import UnknownSession, known_agent
from fim.server.stopping import SENDING, Sending, StreamCut, until_stop
from fim.structured import NonFinite, non_finite
from fim.types import Message

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Router

    from fim.server.api import Api

log = logging.getLogger("fim.server")

STREAM_GRACE = 24 * 3600.0
"""How long sse_starlette lets an A2A stream go on once the server stops (its
`shutdown_grace_period`; its default 0 ended each at SIGTERM): the run's end, or fim's cut
before uvicorn's bound (`fim.server.stopping`), ends it first."""


class _Owner(User):
    """The caller as the SDK's task store sees it: the hash of its API key (tasks of
    another key are not found), never the key itself."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    @property
    def is_authenticated(self) -> bool:
        return bool(self.owner)

    @property
    def user_name(self) -> str:
        return self.owner


class _Context(ServerCallContextBuilder):
    """Carries the agent named in the path and the session owner to the executor, and the
    request headers the SDK reads (its protocol version check) without the credentials: the
    SDK's default builder would copy the bearer key into the call state. The owner is the
    caller the Guard recorded (`fim.server.callers.Caller`), not a header read again."""

    def build(self, request: Request) -> ServerCallContext:
        # deferred: loading fim.server.http costs tens of ms
        from fim.server.http import session_owner

        owner = session_owner(request)
        return ServerCallContext(
            user=_Owner(owner),
            state={
                "agent": request.path_params.get("agent", ""),
                "owner": owner,
                "headers": {
                    k: v
                    for k, v in request.headers.items()
                    if k.lower() not in ("authorization", "cookie", "proxy-authorization")
                },
            },
        )


def _text(value: str) -> str:
    return known().text(value)


def _masked(message: pb.Message) -> pb.Message:
    """A copy of a message whose text parts are masked (the task echoes the user's turn)."""
    copy = pb.Message()
    copy.CopyFrom(message)
    for part in copy.parts:
        if part.HasField("text"):
            part.text = _text(part.text)
    return copy


class FimExecutor(AgentExecutor):
    """Runs the agent of the request's path on the user's text parts."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.here = Here(api)  # its tasks running here: a cancel from elsewhere stops them

    async def execute(self, context: RequestContext, event_queue: Any) -> None:
        owner = str((context.call_context.state if context.call_context else {}).get("owner", ""))
        try:
            with self.here.running(context.task_id or "", owner):
                await self._execute(context, event_queue)
        except Exception:  # never an exception's text (unmasked, internal) to the client
            log.exception("A2A task %s failed", context.task_id)
            updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
            await updater.failed(
                updater.new_agent_message([pb.Part(text="internal error; see the server log")])
            )

    async def _execute(self, context: RequestContext, event_queue: Any) -> None:

        state = context.call_context.state if context.call_context else {}
        agent, owner = str(state.get("agent", "")), str(state.get("owner", ""))
        task_id = context.task_id or uuid.uuid4().hex
        context_id = context.context_id or uuid.uuid4().hex
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:  # the SDK wants the Task before any update
            echo = [_masked(context.message)] if context.message else []
            await event_queue.enqueue_event(
                new_task(task_id, context_id, pb.TaskState.TASK_STATE_SUBMITTED, history=echo)
            )

        def say(text: str) -> pb.Message:
            return updater.new_agent_message([pb.Part(text=_text(text))])

        text = context.get_user_input()
        if not known_agent(self.api.holder.current, agent):
            await updater.failed(say(f"unknown agent '{agent}'"))
            return
        if not text.strip():
            await updater.failed(say("the message has no text part"))
            return
        session = f"a2a:{context_id}"
        try:
            history = await self.api.history(session, owner)
        except UnknownSession:
            await updater.failed(say(f"unknown context '{context_id}'"))
            return
        history.append(Message(role="user", content=text))
        run_id = uuid.uuid4().hex[:12]  # in the stored task: a cancel elsewhere finds it
        await updater.update_status(pb.TaskState.TASK_STATE_WORKING, metadata={"run_id": run_id})
        final: RunFinished | None = None
        problems: list[str] = []
        run = self.api.events(
            agent, history, stream=False, run_id=run_id, session=session, owner=owner
        )
        sending = Sending()
        token = SENDING.set(sending)  # an update stuck on a full queue may be abandoned
        try:
            async with contextlib.aclosing(until_stop(self.api, run_id, run)) as events:
                async for event in events:
                    if event.type == "error":
                        problems.append(getattr(event, "message", ""))
                    if isinstance(event, RunFinished):
                        final = event
                        continue
                    now, line = pb.TaskState.TASK_STATE_WORKING, said(event)
                    if (approval := waiting_on(event)) is not None and line is not None:
                        now, line = (
                            pb.TaskState.TASK_STATE_INPUT_REQUIRED,
                            waiting(approval, line),
                        )
                    await updater.update_status(
                        now,
                        message=say(line) if line is not None else None,
                        metadata=progress(event, run_id)
                        | ({"approval_id": approval} if approval is not None else {}),
                    )
        except StreamCut as cut:  # the stopping server's: the task fails, saying so
            metadata = {"fim_event": "error", "run_id": run_id}
            metadata["fim_event_json"] = json.dumps(known().value(cut.event()))
            await updater.update_status(
                pb.TaskState.TASK_STATE_FAILED, message=say(cut.message), metadata=metadata
            )
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not sending.abandoned or task is None:
                raise
            task.uncancel()  # its run is closed; nobody reads its updates
            return
        except FimError as exc:
            await updater.failed(say(str(exc)))
            return
        finally:
            sending.over = True
            SENDING.reset(token)
        if final is None or final.status == "error":
            why = "; ".join(p for p in problems if p) or "the run ended without a result"
            await updater.failed(say(f"run {run_id} of agent '{agent}' failed: {why}"))
            return
        await self.api.remember(session, owner, history, final.output)
        await updater.add_artifact(
            [pb.Part(text=_text(final.output))],
            name="answer",
            metadata={"run_id": run_id, "status": final.status},
            append=False,
            last_chunk=True,  # the whole answer, sent once: ADK keeps only a last chunk
        )
        # the answer is the artifact; the end's metadata replaces the last progress event's
        await updater.update_status(
            pb.TaskState.TASK_STATE_COMPLETED,
            metadata=progress(final, run_id, exclude={"output"}),
        )

    async def cancel(self, context: RequestContext, event_queue: Any) -> None:
        """The SDK cancels the task running `execute`; the run stops and is recorded
        as cancelled by `Api.events`. A cancel another process took reaches this one
        through the store (`fim.server.a2a_cancel`)."""
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


def a2a_app(api: Api) -> Router:
    """The A2A routes as one router (built on the first A2A request: the SDK is heavy)."""

    # deferred: loading fim.server.http costs tens of ms
    from fim.server.http import JSONResponse, error

    # the handler's own card: only its capabilities are read (streaming on); the cards
    # clients see are built per request from the current snapshot. It has every field the
    # spec requires all the same: the SDK checks it and warned "AgentCard is not
    # spec-compliant" into the log at the first A2A request (newcomer-54 #6)
    template = pb.AgentCard(
        name="fim",
        description="fim agents",
        version="0",
        supported_interfaces=[
            pb.AgentInterface(url="/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="agents", name="agents", description="fim agents", tags=["fim"])],
    )
    executor = FimExecutor(api)

    def caller(owner: str) -> ServerCallContext:  # a cancel another process took
        return ServerCallContext(user=_Owner(owner), state={"owner": owner, "headers": {}})

    handler = Handler(  # a cancel, a resubscription reach the process running the task
        api, executor.here, caller, StoredTaskStore(api),
        agent_executor=executor, agent_card=template,
    )  # fmt: skip
    quiet_refusals()  # a malformed request is a warning line, never a traceback
    dispatcher = JsonRpcDispatcher(
        request_handler=handler,
        context_builder=_Context(),
        enable_v0_3_compat=True,
        shutdown_grace_period=STREAM_GRACE,
    )

    def base(request: Request) -> str:
        return str(request.base_url)

    async def jsonrpc(request: Request) -> Response:
        """The SDK's dispatcher, behind the parse, the nesting cap and the refusal of a
        key given twice that every other body meets: the SDK's own parse (`json.loads`)
        recursed on a deep body (a RecursionError and its traceback per request)."""
        try:
            body = pydantic_core.from_json(await request.body())
        except ValueError as exc:  # its parser's own recursion limit included
            return jsonrpc_error(-32700, f"the request is not JSON: {exc}")
        if nested_deeper(body):
            return jsonrpc_error(-32600, f"the request nests deeper than {MAX_NESTING} levels")
        if (where := non_finite(body)) is not None:  # JSON numbers only, as every body
            return jsonrpc_error(-32600, str(NonFinite(where)))
        if (twice := duplicate_key(await request.body())) is not None:
            return jsonrpc_error(-32600, f"the request has the key '{twice[:200]}' twice")
        if (why := out_of_range(body)) is not None:  # the 0.3 adapter raised on it (-32603)
            rid = body.get("id") if isinstance(body.get("id"), str | int) else None
            problem = {"code": -32602, "message": f"Invalid params: {why}"}
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": problem})
        response = await dispatcher.handle_requests(request)
        if isinstance(response, EventSourceResponse):  # a quiet stream stays open
            response.ping_interval = KEEPALIVE
        return response

    async def project_card(request: Request) -> Response:
        snapshot = api.holder.current
        if not snapshot.agents:
            return error(404, "this project declares no agents")
        return JSONResponse(agent_card_to_dict(agent_card(snapshot, base(request), None)))

    async def one_card(request: Request) -> Response:
        snapshot, name = api.holder.current, request.path_params["agent"]
        if name not in snapshot.agents:
            return error(404, f"unknown agent '{name}'", f"agents: {', '.join(snapshot.agents)}")
        return JSONResponse(agent_card_to_dict(agent_card(snapshot, base(request), name)))

    return Router(
        [
            Route(CARD_PATH, project_card, methods=["GET"]),
            Route("/a2a/{agent}" + CARD_PATH, one_card, methods=["GET"]),
            Route("/a2a/{agent}", jsonrpc, methods=["POST"]),
        ]
    )
