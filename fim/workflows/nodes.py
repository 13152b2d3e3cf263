"""`NodeContext`: what a node's executor may do during a run (the `NodeRuntime` protocol).

The engine knows nothing about what a node does; it renders nothing, calls no model. It
calls `node.execute(ctx)` (each node type is one file in `fim.workflows.node_types`) and
gets the node's output back (or a `Paused` for a human node). The executors reach models,
tools, connectors, MCP servers, agents and the store through the methods here. Heavy modules
(models, connectors, MCP, jsonschema) are imported inside those methods on purpose, so a
workflow of tool nodes never imports litellm.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fim.build.builtin_names import is_python_tool
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl
from fim.errors import RunError
from fim.idempotency import idempotency_key, idempotent
from fim.masking import known
from fim.run.services import RunContext, Services
from fim.structured import OutputContract, parse_json
from fim.tools import builtin
from fim.tools.registry import ToolRegistry
from fim.tools.view import ViewError, prepare_view, view_of
from fim.types import CallView, Message, Model, Tool, ToolResult
from fim.workflows import adapters, node_hooks, templates
from fim.workflows.arg_hints import for_author
from fim.workflows.node_hooks import Rebuild
from fim.workflows.node_types.base import NodeError, Paused, parse_output

__all__ = ["NodeContext", "NodeError", "Paused", "call_tool", "parse_output", "resolve_tool"]

MAX_FAILED_OUTPUT = 500
"""The most of a failed agent's output an agent node's error quotes."""


@dataclass
class NodeContext:
    """What an executor may use: the run's snapshot and services, the template scope
    (`inputs`, `nodes`, `env`), and the shared tool registry of the run."""

    snapshot: Snapshot
    services: Services
    workflow: str
    run_id: str
    node_id: str
    scope: dict[str, Any]
    depth: int = 0
    parents: tuple[str, ...] = ()
    hooks: bool = True
    guard: Any = None
    """The hook runner of the agent that started this workflow, if one did."""
    session: str | None = None
    """The session of the agent run that started this workflow, if one did: the runs its
    nodes start (agent nodes, `llm` nodes) count toward that session's budgets, as the
    delegates of that run do."""
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    extra_tools: Mapping[str, Tool] = field(default_factory=dict)
    emit: Callable[[Any], None] = lambda _event: None
    """Sends an event into the run's trace (tool calls of tool-like nodes)."""
    _call_id: str = field(default="", init=False)

    def traced_call(self, name: str, arguments: dict[str, Any]) -> Callable[[ToolResult], None]:
        """Emit `tool_call` now and return the function that emits its `tool_result`, so
        eval assertions like `tool_called` and SSE clients see workflow calls as they see
        an agent's."""

        # deferred: loading fim.events costs tens of ms
        from fim.events import ToolCallEvent, ToolResultEvent

        call_id = self._call_id or self.next_call_id()
        mask = self.snapshot.mask
        masked = self.snapshot.masker.value(arguments)
        self.emit(ToolCallEvent(run_id=self.run_id, call_id=call_id, name=name, arguments=masked))
        started = time.perf_counter()

        def finished(result: ToolResult) -> None:
            self.emit(
                ToolResultEvent(
                    run_id=self.run_id,
                    call_id=call_id,
                    name=name,
                    content=mask(result.content),
                    is_error=result.is_error,
                    duration_ms=(time.perf_counter() - started) * 1000,
                )
            )

        return finished

    def next_call_id(self) -> str:
        self._call_id = f"{self.node_id}-{next(_CALL_IDS)}"
        return self._call_id

    async def guarded(
        self,
        name: str,
        args: dict[str, Any],
        view: Any = None,
        rebuild: Rebuild | None = None,
    ) -> tuple[dict[str, Any], Any]:
        """PreToolUse of the starting agent's hooks for a node's call
        (`fim.workflows.node_hooks.guarded`)."""
        return await node_hooks.guarded(self, name, args, view, rebuild)

    async def guarded_result(self, view: Any, result: ToolResult) -> ToolResult:
        """PostToolUse of the starting agent's hooks for a node's result."""
        return await node_hooks.guarded_result(self, view, result)

    def render(self, value: Any) -> Any:
        try:
            return templates.render(value, self.scope)
        except templates.TemplateError as exc:
            raise NodeError(str(exc)) from None

    def render_text(self, value: str) -> str:
        try:
            return templates.render_text(value, self.scope)
        except templates.TemplateError as exc:
            raise NodeError(str(exc)) from None

    def run_context(self) -> RunContext:
        """A RunContext for builtins that are configured per run (sandbox, web_fetch)."""
        return RunContext(
            snapshot=self.snapshot,
            agent=AgentDecl(name=self.workflow, description=f"workflow {self.workflow}"),
            services=self.services,
            run_id=self.run_id,
            depth=self.depth,
            hooks_enabled=self.hooks,
            parents=self.parents,
        )

    # ------------------------------------------------------------ NodeRuntime

    def truthy(self, expression: str) -> bool:
        try:
            return templates.truthy(expression, self.scope)
        except templates.TemplateError as exc:
            raise NodeError(str(exc)) from None

    def resolve_tool(self, name: str) -> Tool:
        try:
            return resolve_tool(self, name)
        except RunError as exc:
            raise NodeError(str(exc)) from None

    async def call_tool(
        self,
        tool: Tool,
        args: dict[str, Any],
        timeout: float | None = None,
        sources: Mapping[str, Any] | None = None,
    ) -> Any:
        return await call_tool(self, tool, args, timeout, sources)

    def connector_action(self, connector: str, action: str) -> Tool:
        return adapters.connector_action(self, connector, action)

    async def run_sql(self, connector: str, sql: str, params: dict[str, Any]) -> Any:
        return await adapters.run_sql(self, connector, sql, params)

    async def call_mcp(self, server: str, tool: str, args: dict[str, Any]) -> Any:
        return await adapters.call_mcp(self, server, tool, args)

    async def ask_agent(self, agent: str, task: str, output_schema: Any) -> Any:
        return await ask_agent(self, agent, task, output_schema)

    async def complete(self, model: Any, system: str | None, prompt: str, schema: Any) -> Any:
        return await complete(self, model, system, prompt, schema)

    async def pause(self, prompt: str, expires_in: float | None = None) -> Paused:
        """Open an approval for this node; the run pauses until it is resolved, or until
        it expires `expires_in` seconds from now (`fim.workflows.expiry` then ends it)."""
        # deferred: loading fim.store costs a few ms
        from fim.store import get_store

        prompt = self.snapshot.mask(prompt)
        approval_id = await get_store(self.services).create_approval(
            self.run_id,
            agent=self.workflow,
            tool_name=f"workflow:{self.workflow}:{self.node_id}",
            args={},
            reason=prompt,
            expires_at=None if expires_in is None else time.time() + expires_in,
            kind="workflow",
            data={"workflow": self.workflow, "run_id": self.run_id, "node": self.node_id},
        )
        return Paused(approval_id=approval_id, prompt=prompt)


_CALL_IDS = itertools.count(1)


# --------------------------------------------------------------------------- helpers


def resolve_tool(ctx: NodeContext, name: str) -> Tool:
    """A tool node's tool: one the embedding application passed, else a project function
    (`module:function`), else a builtin."""
    existing = ctx.registry.get(name)
    if existing is not None:
        return existing
    tool = ctx.extra_tools.get(name)
    if tool is None and is_python_tool(name):
        # kept out of the run's registry: it is known there by its function's name, which
        # two modules' functions may share; `call_tool` gives it a registry of its own
        return python_tool(ctx, name)
    if tool is None:
        tool = builtin.load(name, ctx.run_context())
    if name not in ctx.registry:
        ctx.registry.add(tool)
    return tool


def python_tool(ctx: NodeContext, ref: str) -> Tool:
    """The tool of project function `ref`, built as for an agent's `tools:` entry
    (`fim.tools.python_tools`: the module the snapshot pinned, its schema from the type
    hints): its call goes through the same hooks, read-only guard and argument checks as a
    builtin's in `call_tool`."""
    # deferred: the project's Python is loaded only by a run of a node that calls it
    from fim.hooks.python_hooks import load_module
    from fim.tools.python_tools import PythonToolError, resolve

    try:
        return resolve(ctx.snapshot, ref, load_module)
    except PythonToolError as exc:
        raise RunError(exc.message, hint=exc.hint) from None


async def call_tool(
    ctx: NodeContext,
    tool: Tool,
    args: dict[str, Any],
    timeout: float | None = None,
    sources: Mapping[str, Any] | None = None,
) -> Any:
    """Validate and run a tool through a registry, so argument errors name the same
    problems as in an agent run, worded for the workflow's author (`sources`, the node's
    args before rendering, name the template that gave a wrong value: `arg_hints`); an
    error result fails the node, as does a call past `timeout` seconds."""

    registry = ctx.registry if ctx.registry.get(tool.name) is tool else ToolRegistry([tool])
    try:
        await prepare_view(tool, args)
        view = view_of(tool, args)
    except ViewError as exc:
        raise NodeError(f"cannot tell what the call to '{tool.name}' targets ({exc})") from None

    async def rebuild(arguments: dict[str, Any]) -> CallView:
        """The view of the call a hook rewrote, built as the first one was."""
        await prepare_view(tool, arguments)
        return view_of(tool, arguments)

    args, view = await ctx.guarded(tool.name, args, view, rebuild)
    finished = ctx.traced_call(tool.name, args)

    # the node's one call: a re-run after a worker crash sends the same key (fim.idempotency)
    with idempotent(idempotency_key(ctx.run_id, ctx.node_id)):
        result: ToolResult = await registry.call(tool.name, args, timeout=timeout)
    result = await ctx.guarded_result(view, result)
    finished(result)
    if result.is_error:
        raise NodeError(for_author(result.content, tool.parameters, args, sources))
    return parse_output(result.content)


async def ask_agent(ctx: NodeContext, agent: str, task: str, output_schema: Any) -> Any:
    """Run agent `agent` on `task` as a child of the workflow run; its answer (parsed when
    it has an output contract) is the node's output."""
    # deferred: loading fim.engines.dag costs hundreds of ms
    from fim.run.agent import ask
    from fim.run.overrides import RunOverrides, output_contract

    if agent not in ctx.snapshot.agents:
        raise NodeError(
            f"unknown agent '{agent}' (agents: {', '.join(sorted(ctx.snapshot.agents))})"
        )
    decl = ctx.snapshot.agents[agent]
    try:
        contract = output_contract(ctx.snapshot, output_schema)
        finished = await ask(
            ctx.snapshot,
            agent,
            task,
            services=ctx.services,
            hooks=ctx.hooks,
            guard=ctx.guard,
            depth=ctx.depth + 1,
            parents=(*ctx.parents, ctx.workflow),
            overrides=RunOverrides(output=contract) if contract is not None else None,
            session=ctx.session,
        )  # owned by the key that started the workflow run (`current_owner`, the scheduler)
    except RunError as exc:
        raise NodeError(f"agent '{agent}': {exc}") from None
    if finished.status != "ok":
        # masked whole, then cut: the output may quote a secret (a tool's error, a hook's
        # reason), and a cut inside it left a piece no mask matches in the node's error
        shown, cut = known().head(finished.output, MAX_FAILED_OUTPUT)
        raise NodeError(
            f"agent '{agent}' ended with status {finished.status}: {shown}" + ("..." if cut else "")
        )
    if contract is not None or decl.output_schema is not None:
        return parse_json(finished.output)  # validated by the engine already
    return finished.output


USAGE_PREFIX = "workflow:"
"""The usage table's agent column for a workflow's `llm` nodes: `workflow:<name>` (an
agent's name never has a colon), so `fim usage` shows a workflow's own model calls on a row
of their own."""


async def complete(
    ctx: NodeContext, model_ref: Any, system: str | None, prompt: str, output_schema: Any
) -> Any:
    """One model call (`system` and `prompt` already rendered); with an output schema the
    reply is validated, and a rejected reply is retried once with the problem named.

    The node is a run of its own, as an agent node is (`fim.run.model_run`): one
    more run of the tree that started the workflow (`max_runs`), held to that tree's
    per-run limits and to the project's, the key's and the session's budgets, and written
    to the usage table as agent `workflow:<name>` under the workflow's run id (which the
    workflow's key owns, so the key's daily budget counts it)."""
    # deferred: loading fim.llm costs a few ms
    from fim.llm import make_model
    from fim.run.model_run import model_run
    from fim.run.overrides import output_contract

    try:
        model = make_model(ctx.snapshot.model_settings(model_ref), ctx.snapshot.root)
    except RunError as exc:
        raise NodeError(str(exc)) from None
    messages: list[Message] = []
    if system:
        messages.append(Message(role="system", content=system))
    try:
        contract = output_contract(ctx.snapshot, output_schema)
    except RunError as exc:
        raise NodeError(str(exc)) from None
    runner = AgentDecl(
        name=f"{USAGE_PREFIX}{ctx.workflow}",
        description=f"the llm nodes of workflow {ctx.workflow}",
        model=model_ref,  # its price in fim.yaml prices the calls
    )
    try:
        async with model_run(
            ctx.snapshot,
            runner,
            model,
            services=ctx.services,
            run_id=ctx.run_id,
            session=ctx.session,
        ) as model:
            return await _reply(model, messages, prompt, contract)
    except RunError as exc:  # a budget, the tree's max_runs, the provider
        raise NodeError(str(exc)) from None


async def _reply(
    model: Model, messages: list[Message], prompt: str, contract: OutputContract | None
) -> Any:
    """The node's output: the reply's text, or with a contract its value, the reply retried
    once with the problem named when it is rejected."""
    if contract is None:
        messages.append(Message(role="user", content=prompt))
        response = await model.complete(messages)
        return response.message.content or ""
    messages.append(Message(role="user", content=f"{prompt}\n\n{contract.instruction()}"))
    problem = ""
    for attempt in range(2):
        response = await model.complete(messages)
        reply = response.message.content or ""
        value, problem_or_none = contract.validate(reply)
        if problem_or_none is None:
            return value
        problem = problem_or_none
        if attempt == 0:
            messages.append(Message(role="assistant", content=reply))
            messages.append(Message(role="user", content=contract.retry_message(problem)))
    raise NodeError(f"llm output rejected after one retry: {problem}")
