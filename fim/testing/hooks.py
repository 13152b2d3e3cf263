"""Helpers for testing hooks without a model: a run context from plain dicts, and one tool
call through the same Pre -> tool -> Post pipeline the engine uses.

Shipped in the library (as `fim.llm.scripted` ships ScriptedModel) so the hook tests, the
engine tests and a user's tests of their own hooks/*.py build contexts the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fim.build.project_modules import read_modules
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, HookDecl, Project
from fim.events import HookEvent, HookRunner
from fim.run.services import RunContext, Services
from fim.tools.view import ViewError, prepare_view, retargeted, view_of
from fim.types import CallView, Tool, ToolResult


def make_context(
    root: Path,
    hooks: list[dict[str, Any]] | None = None,
    *,
    agent: dict[str, Any] | None = None,
    project: dict[str, Any] | None = None,
    hook_decls: dict[str, dict[str, Any]] | None = None,
    secrets: frozenset[str] = frozenset(),
    services: Services | None = None,
    hooks_enabled: bool = True,
) -> RunContext:
    """A RunContext for agent `tester` whose `hooks:` are given as they would be in YAML."""
    project_decl = Project.model_validate({"state": "sqlite:///.fim/state.db", **(project or {})})
    agent_decl = AgentDecl.model_validate({"name": "tester", **(agent or {}), "hooks": hooks or []})
    decls = {
        name: HookDecl.model_validate({"name": name, **data})
        for name, data in (hook_decls or {}).items()
    }
    snapshot = Snapshot(
        root=Path(root),
        project=project_decl,
        agents={agent_decl.name: agent_decl},
        hooks=decls,
        secrets=secrets,
        version="test",
        modules=read_modules(Path(root), project_decl.paths.hooks)[0],  # as a compile pins
    )
    services = services or Services(  # the developer's own runs (fim.run.capture)
        root=Path(root), state_url=project_decl.state, providers=CAPABILITIES, local=True
    )
    return RunContext(
        snapshot=snapshot, agent=agent_decl, services=services, hooks_enabled=hooks_enabled
    )


@dataclass
class CallOutcome:
    """What one tool call looked like from outside: did it run, what the model read."""

    ran: bool
    observation: str
    blocked: bool = False
    args: dict[str, Any] = field(default_factory=dict)
    events: list[HookEvent] = field(default_factory=list)


async def call_tool(
    runner: HookRunner,
    tool: Tool,
    args: dict[str, Any],
    *,
    agent: str = "tester",
    run_id: str = "run-1",
    metadata: dict[str, Any] | None = None,
) -> CallOutcome:
    """Run `tool` with `args` through the PreToolUse and PostToolUse chains of `runner`.

    As in the engine, hooks see the call's view (`fim.tools.view.view_of`: a meta-tool's
    real target), and a rewritten call is judged again with its view built afresh from
    the rewritten arguments (`review`), a rewrite to another target refused; so a test of
    a guard exercises the path a run takes."""
    extra = metadata or {}
    try:
        await prepare_view(tool, args)
        view = view_of(tool, args)
    except ViewError as exc:
        return CallOutcome(False, f"Blocked: cannot tell what the call targets ({exc})", True)

    async def again(target_args: dict[str, Any]) -> CallView:
        arguments = view.call_arguments(target_args)
        await prepare_view(tool, arguments)
        fresh = view_of(tool, arguments)
        if fresh.name != view.name:
            raise ViewError(retargeted(view.name, fresh.name))
        return fresh

    async def review(target_args: dict[str, Any]) -> dict[str, Any]:
        return {**(await again(target_args)).metadata, **extra}

    context = view.context("PreToolUse", agent, run_id, extra)
    if getattr(runner, "reviews", False):  # a HookChain or Stacked (fim.hooks.runner)
        run: Any = runner.run
        pre, events = await run("PreToolUse", context, review)
    else:
        pre, events = await runner.run("PreToolUse", context)
    if not pre.allow:
        return CallOutcome(False, f"Blocked: {pre.error}", True, args, events)
    if pre.modified_args is not None:
        try:
            rewritten = await again(pre.modified_args)
        except ViewError as exc:
            return CallOutcome(False, f"Blocked: {exc}", True, args, events)
        args, view = view.call_arguments(pre.modified_args), rewritten
    try:
        raw = await tool.run(**args)
        result = raw if isinstance(raw, ToolResult) else ToolResult(content=str(raw))
    except Exception as exc:
        result = ToolResult(content=f"Error: {type(exc).__name__}: {exc}", is_error=True)
    post, more = await runner.run(
        "PostToolUse",
        view.context(
            "PostToolUse", agent, run_id, {**extra, "is_error": result.is_error}, result.content
        ),
    )
    events += more
    if not post.allow:
        return CallOutcome(True, f"Blocked: {post.error}", True, args, events)
    content = post.modified_result if post.modified_result is not None else result.content
    return CallOutcome(True, content, False, args, events)
