"""`readonly_guard`: no writes from a read-only agent or project, whatever the model says.

Blocks every call that writes: metadata `access: write|admin` (connector actions, shell,
python_exec, file_ops' writes, project functions not marked `@fim.tools.read_only`) and
any SQL that is not exactly one read statement. It is active when the agent
(`read_only: true`) or the project (`read_only: true` in fim.yaml) is read-only, or
always with `with: {always: true}`.
What a write is, is `fim.hooks.writes.write_of`, the decision `confirm` asks a human
about too; its SQL rules are the database connector's own read-only decision
(`fim.connectors.readonly.decide`, memoised), so the hook and the connector can never
disagree about what "read-only" means, and the statement is parsed once per call, off
the event loop.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from fim.hooks.base import PreToolUseHook
from fim.hooks.writes import write_of
from fim.types import HookContext, HookResult


class ReadonlyGuardOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    always: bool = False
    """Guard even when neither the agent nor the project is declared read-only."""


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
        write = await write_of(context)
        if write is None:
            return HookResult()
        if write.access is not None:
            return HookResult(
                allow=False,
                error=f"{write.describe(context.tool_name)} and {why}, so it may only read. "
                "Use a read action instead, or tell the user a human has to make this change",
            )
        return HookResult(
            allow=False, error=f"{why}, so only one plain read statement may run: {write.refusal}"
        )


HOOK = ReadonlyGuard
