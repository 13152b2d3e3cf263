"""`readonly_guard`: no writes from a read-only agent or project, whatever the model says.

Blocks connector actions declared `access: write|admin` and any SQL that is not exactly
one read statement. It is active when the agent (`read_only: true`) or the project
(`read_only: true` in fim.yaml) is read-only, or always with `with: {always: true}`.
The SQL rules are the database connector's own read-only decision
(`fim.connectors.readonly.decide`, memoised), so the hook and the connector can never
disagree about what "read-only" means, and the statement is parsed once per call.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from fim.hooks.base import PreToolUseHook
from fim.types import HookContext, HookResult


class ReadonlyGuardOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    always: bool = False
    """Guard even when neither the agent nor the project is declared read-only."""


def sql_of(context: HookContext) -> str | None:
    """The SQL a call would run: the `sql` argument, or `query` on a SQL tool."""
    args = context.tool_args or {}
    meta = context.metadata
    if isinstance(args.get("sql"), str):
        return args["sql"]
    if isinstance(args.get("query"), str) and (meta.get("sql") or meta.get("kind") == "database"):
        return args["query"]
    if isinstance(meta.get("sql"), str) and meta["sql"].strip():
        return meta["sql"]
    return None


class ReadonlyGuard(PreToolUseHook):
    Options: ClassVar[type[BaseModel]] = ReadonlyGuardOptions
    priority = 10

    def _why_active(self, context: HookContext) -> str | None:
        meta = context.metadata
        run = self.run_context
        if self.options.always:
            return "this agent's readonly_guard is set to always"
        if meta.get("agent_read_only") or (run is not None and run.agent.read_only):
            return f"agent '{context.agent}' is read-only"
        if meta.get("project_read_only") or (run is not None and run.snapshot.project.read_only):
            return "the project is read-only"
        return None

    async def __call__(self, context: HookContext) -> HookResult:
        why = self._why_active(context)
        if why is None:
            return HookResult()
        access = context.metadata.get("access")
        if access in ("write", "admin"):
            return HookResult(
                allow=False,
                error=f"'{context.tool_name}' is a {access} action and {why}, so it may only "
                "read. Use a read action instead, or tell the user a human has to make this "
                "change",
            )
        sql = sql_of(context)
        if sql is not None:
            import asyncio  # deferred: `fim validate` loads this hook's options, not asyncio

            # deferred: loading fim.connectors.database costs tens of ms
            from fim.connectors.readonly import decide
            from fim.connectors.sql_guard import dialect_for

            # parsing model-written SQL is untrusted work: off the event loop
            decision = await asyncio.to_thread(decide, sql, _dialect(context.metadata, dialect_for))
            if not decision.allowed:
                return HookResult(
                    allow=False,
                    error=f"{why}, so only one plain read statement may run: {decision.refusal}",
                )
        return HookResult()


def _dialect(meta: dict[str, Any], dialect_for: Any) -> str | None:
    if isinstance(meta.get("dialect"), str):
        return meta["dialect"]
    if isinstance(meta.get("url"), str):
        return dialect_for(meta["url"])
    return None


HOOK = ReadonlyGuard
