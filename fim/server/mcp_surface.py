"""fim as an MCP server: every agent and every workflow of the current snapshot is a tool.

The same server answers at `/mcp` of `fim serve` (streamable HTTP, behind the API's bearer
keys and body limit) and on stdio (`fim mcp serve`), so Claude Code, Claude Desktop or
Cursor can use a fim project as a tool server. Calls go through the surfaces' one run entry
point (`Api.events` -> `fim.run.agent.run_agent`, `WorkflowEngine`), so hooks, approvals,
persistence and masking behave as they do over HTTP:

- an agent tool takes `input` and an optional `session_id`; each API key names its own
  sessions (`fim.run.sessions`: another key's of the same name is not there);
- a workflow tool's input schema is the workflow's `inputs`; a workflow that pauses at a
  human node returns `status: paused` with the approval id and how to approve it;
- each event of the run (tool calls, hook decisions, "approval pending" notices) is sent
  as a progress notification when the client asked for progress: a line of text for a
  person, the event's JSON in its `_meta` (`fim.server.mcp_progress`);
- an agent that cannot write (`read_only: true`, its own or the project's) is a tool with
  `readOnlyHint: true`, and so is every workflow of a read-only project; any other tool
  makes no claim (MCP's defaults: it may write);
- `fim mcp serve --agent NAME` serves only the agents and workflows it names (`expose`);
- everything returned (text, structured content, progress messages) is masked.

The tool list is read from the snapshot current at each `tools/list`, so a hot reload shows
up on the next listing. The SDK is imported only when this module is.
"""

from __future__ import annotations

import json
import logging
import uuid
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from fim.errors import FimError
from fim.events import Event, Notice, RunFinished, WorkflowFinished
from fim.masking import known
from fim.server.mcp_progress import event_line, event_meta
from fim.server.sessions import UnknownSession
from fim.types import Message
from fim.workflows.inputs import required

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.server.api import Api

log = logging.getLogger("fim.server")

WORKFLOW_PREFIX = "workflow_"
"""A workflow whose name is also an agent's is offered as `workflow_<name>`."""


def agent_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "input": {"type": "string", "description": "The request for the agent."},
            "session_id": {
                "type": "string",
                "description": "Continue (or start) a conversation kept by the server under "
                "this id; omit for a one-off request.",
            },
        },
        "required": ["input"],
        "additionalProperties": False,
    }


def workflow_schema(decl: Any) -> dict[str, Any]:
    """JSON Schema of a workflow's declared inputs (types, descriptions, defaults)."""

    properties: dict[str, Any] = {}
    needed: list[str] = []
    for key, spec in decl.inputs.items():
        prop: dict[str, Any] = {"type": spec.type}
        if spec.description:
            prop["description"] = spec.description
        if spec.default is not None:
            prop["default"] = spec.default
        properties[key] = prop
        if spec.default is None and required(spec):
            needed.append(key)
    return {
        "type": "object",
        "properties": properties,
        "required": needed,
        "additionalProperties": False,
    }


def tool_names(
    snapshot: Snapshot, expose: frozenset[str] | None = None
) -> dict[str, tuple[str, str]]:
    """MCP tool name -> ("agent" | "workflow", declared name); with `expose`, only the
    agents and workflows it names."""
    names: dict[str, tuple[str, str]] = {a: ("agent", a) for a in snapshot.agents}
    for w in snapshot.workflows:
        names[f"{WORKFLOW_PREFIX}{w}" if w in names else w] = ("workflow", w)
    if expose is None:
        return names
    return {tool: entry for tool, entry in names.items() if entry[1] in expose}


def list_tools(snapshot: Snapshot, expose: frozenset[str] | None = None) -> list[types.Tool]:
    tools: list[types.Tool] = []
    for tool, (kind, name) in tool_names(snapshot, expose).items():
        read_only = snapshot.project.read_only  # `readonly_guard` on every run, workflows too
        if kind == "agent":
            decl = snapshot.agents[name]
            description = decl.description or f"fim agent '{name}'"
            schema = agent_schema()
            read_only = read_only or decl.read_only
        else:
            wf = snapshot.workflows[name]
            description = wf.description or f"fim workflow '{name}'"
            schema = workflow_schema(wf)
        tools.append(
            types.Tool(
                name=tool,
                title=f"{name} ({kind})",
                description=description,
                input_schema=schema,
                # only a claim fim keeps: without it a client takes the tool as one that writes
                annotations=types.ToolAnnotations(read_only_hint=True) if read_only else None,
            )
        )
    return tools


def _owner(ctx: Any) -> str:
    """The session owner of this call: the one the Guard recorded for the HTTP request the
    call came in (the hash of the key it let in, never a header read again), or "" on
    stdio (one local user)."""
    # deferred: loading fim.server.http costs tens of ms
    from fim.server.http import session_owner

    request = getattr(ctx, "request", None)
    if request is None or not hasattr(request, "scope"):
        return ""
    return session_owner(request)


class _Progress:
    """Reports each run event as `notifications/progress` (a no-op without a token): a
    line for a person as its `message`, the event's JSON in its `_meta`."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.count = 0

    async def __call__(self, event: Event) -> None:
        if event.type == "token":
            return
        self.count += 1
        token = (getattr(self.ctx, "meta", None) or {}).get("progress_token")
        try:
            if token is None:  # none asked for (a no-op), or a client in this process
                await self.ctx.session.report_progress(self.count, None, event_line(event))
                return
            params = types.ProgressNotificationParams.model_validate(
                {
                    "progressToken": token,
                    "progress": self.count,
                    "message": event_line(event),
                    "_meta": event_meta(event),
                }
            )
            await self.ctx.session.send_notification(
                types.ProgressNotification(params=params), related_request_id=self.ctx.request_id
            )
        except Exception:  # a client that went away must not fail the run's bookkeeping
            return


def _result(text: str, data: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    masked = known().value(data)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=known().text(text))],
        structured_content=masked,
        is_error=error,
    )


def _failure(message: str) -> types.CallToolResult:
    text = known().text(message)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def call_agent(api: Api, name: str, args: dict[str, Any], ctx: Any) -> types.CallToolResult:
    """Run one agent request (the HTTP API's path: hooks, persistence, sessions)."""

    text = args.get("input")
    session = args.get("session_id")
    extra = sorted(set(args) - {"input", "session_id"})
    if not isinstance(text, str) or not text.strip():
        return _failure("input: a non-empty string is required")
    if session is not None and (not isinstance(session, str) or not 0 < len(session) <= 200):
        return _failure("session_id: a string of 1 to 200 characters is expected")
    if session is not None and "\x00" in session:  # the store would keep another id
        return _failure("session_id: a NUL character (\\u0000) is not allowed")
    if extra:
        return _failure(f"unknown argument(s): {', '.join(extra)} (expected input, session_id)")
    owner = _owner(ctx)
    try:
        history = await api.history(session, owner)
    except UnknownSession as exc:
        return _failure(exc.message)
    history.append(Message(role="user", content=text))
    run_id = uuid.uuid4().hex[:12]
    progress = _Progress(ctx)
    final: RunFinished | None = None
    problems: list[str] = []
    try:
        running = api.events(
            name, history, stream=False, run_id=run_id, session=session, owner=owner
        )
        async for event in running:
            await progress(event)
            if event.type == "error":
                problems.append(getattr(event, "message", ""))
            if isinstance(event, RunFinished):
                final = event
    except FimError as exc:
        return _failure(str(exc))
    if final is None:
        return _failure(f"agent '{name}' ended without a result (run {run_id})")
    data = {
        "run_id": run_id,
        "agent": name,
        "status": final.status,
        "output": final.output,
        "session_id": session,
    }
    if final.status == "error":
        message = "; ".join(p for p in problems if p) or final.output or "the run failed"
        return _result(f"run {run_id} of agent '{name}' failed: {message}", data, error=True)
    await api.remember(session, owner, history, final.output)
    return _result(final.output, data)


def approval_help(approval_id: str, run_id: str) -> str:
    return (
        f"approve over HTTP with POST /v1/approvals/{approval_id} "
        f'{{"decision": "approve"}} (or "deny"), which resumes the run; or '
        f"`fim approvals approve {approval_id}` then `fim workflow resume {run_id}`"
    )


async def call_workflow(
    api: Api, name: str, args: dict[str, Any], ctx: Any
) -> types.CallToolResult:
    """Start one workflow run; a run that pauses at a human node returns that state."""
    # deferred: loading fim.workflows.engine costs tens of ms (and starlette, the limits)
    from fim.server.bodies import inputs_too_large
    from fim.server.limits import check_parked
    from fim.store import get_store
    from fim.store.owners import claimed
    from fim.workflows.engine import WorkflowEngine

    too_large = inputs_too_large(args)
    if too_large:
        return _failure(f"inputs: {too_large}")
    engine = WorkflowEngine(api.holder.current, name, api.services)
    owner = _owner(ctx)  # the run, its agent nodes and its approvals are this key's
    progress = _Progress(ctx)
    final: WorkflowFinished | None = None
    waiting: list[dict[str, Any]] = []
    slot = parked = None
    try:
        store = get_store(api.services)
        limits = api.holder.current.project.server.key_limits
        # a place among its key's runs that may pause (capped): `Busy`, a failed call
        parked = await check_parked(store, limits, owner, engine.run_id, name)
        slot = api.limits.for_run(owner)  # over `server.key_limits`: `Busy`, a failed call
        async for event in claimed(store, engine.run_id, owner, engine.run(args)):
            await progress(event)
            if isinstance(event, Notice) and event.data.get("approval_id"):
                waiting.append(event.data)
            if isinstance(event, WorkflowFinished):
                final = event
    except FimError as exc:
        return _failure(str(exc))
    finally:
        if slot is not None:
            slot.release()
        if parked is not None:  # a run that never began gives its place back
            await parked.release(engine.state is not None)
    if final is None:
        return _failure(f"workflow '{name}' ended without a result")
    data: dict[str, Any] = {
        "run_id": engine.run_id,
        "workflow": name,
        "status": final.status,
        "outputs": final.outputs,
    }
    if final.status == "paused":
        data["approvals"] = [
            {
                "approval_id": w["approval_id"],
                "node": w.get("node"),
                "prompt": w.get("prompt"),
                "how": approval_help(w["approval_id"], engine.run_id),
            }
            for w in waiting
        ]
        lines = [f"workflow run {engine.run_id} paused, waiting for a human:"]
        lines += [
            f"- {w.get('prompt') or 'approval'}: {approval_help(w['approval_id'], engine.run_id)}"
            for w in waiting
        ]
        return _result("\n".join(lines), data)
    text = json.dumps(final.outputs, ensure_ascii=False, default=str)
    return _result(text, data, error=final.status != "ok")


def build_server(api: Api, expose: frozenset[str] | None = None) -> Server[Any]:
    """The MCP server over one `Api` (its snapshot holder, services and sessions); with
    `expose`, only the agents and workflows it names are tools."""

    try:
        fim_version = version("fim")
    except PackageNotFoundError:
        fim_version = "0"

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=known().value(list_tools(api.holder.current, expose)))

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        names = tool_names(api.holder.current, expose)
        if params.name not in names:
            return _failure(f"unknown tool '{params.name}'; tools: {', '.join(names)}")
        kind, name = names[params.name]
        args = dict(params.arguments or {})
        try:
            if kind == "agent":
                return await call_agent(api, name, args, ctx)
            return await call_workflow(api, name, args, ctx)
        except Exception:  # never an exception's text (unmasked, internal) to the client
            log.exception("MCP call of %s '%s' failed", kind, name)
            return _failure("internal error; see the server log")

    snapshot = api.holder.current
    return Server(
        "fim",
        version=fim_version,
        title=f"fim project {snapshot.project.name}",
        instructions=(
            f"Agents and workflows of the fim project '{snapshot.project.name}'. "
            + (snapshot.project.description or "")
        ).strip(),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


async def serve_stdio(api: Api, stdout: Any = None, expose: frozenset[str] | None = None) -> None:
    """Serve the MCP protocol on this process's stdin/stdout until the client closes it;
    with `stdout` (a text stream: `fim mcp serve` gives fim's own, `claim_stdout`) the
    messages are written there and nowhere else; `expose` as `build_server`'s."""
    # deferred: anyio comes with the SDK, loaded by now
    import anyio

    server = build_server(api, expose)
    streams = stdio_server() if stdout is None else stdio_server(stdout=anyio.wrap_file(stdout))
    async with streams as (read, write):
        await server.run(read, write, server.create_initialization_options())
