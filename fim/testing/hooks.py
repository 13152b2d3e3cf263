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
from fim.types import HookContext, Tool, ToolResult


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
    services = services or Services(
        root=Path(root), state_url=project_decl.state, providers=CAPABILITIES
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
    """Run `tool` with `args` through the PreToolUse and PostToolUse chains of `runner`."""
    meta = {**tool.metadata, **(metadata or {})}
    pre, events = await runner.run(
        "PreToolUse",
        HookContext(
            point="PreToolUse",
            agent=agent,
            run_id=run_id,
            tool_name=tool.name,
            tool_args=args,
            metadata=meta,
        ),
    )
    if not pre.allow:
        return CallOutcome(False, f"Blocked: {pre.error}", True, args, events)
    if pre.modified_args is not None:
        args = pre.modified_args
    try:
        raw = await tool.run(**args)
        result = raw if isinstance(raw, ToolResult) else ToolResult(content=str(raw))
    except Exception as exc:
        result = ToolResult(content=f"Error: {type(exc).__name__}: {exc}", is_error=True)
    post, more = await runner.run(
        "PostToolUse",
        HookContext(
            point="PostToolUse",
            agent=agent,
            run_id=run_id,
            tool_name=tool.name,
            tool_args=args,
            tool_result=result.content,
            metadata={**meta, "is_error": result.is_error},
        ),
    )
    events += more
    if not post.allow:
        return CallOutcome(True, f"Blocked: {post.error}", True, args, events)
    content = post.modified_result if post.modified_result is not None else result.content
    return CallOutcome(True, content, False, args, events)
