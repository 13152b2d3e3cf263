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

The text of a statement cannot show what a function or a view it names does, so a call
this guard allows also runs read-only in the database (`holds_over`, which the database
tools ask when the statement runs): the guard's own decision (on, and its matcher matching
the call) on the call that runs, whichever way the guard was turned on.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from fim.hooks.base import PreToolUseHook
from fim.hooks.claude import names_of
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

    def judges(self, context: HookContext) -> bool:
        """Whether this guard judges the call `context` and is on for it: its matcher
        matches the call as the chain matches it (`fim.hooks.runner.HookChain.run`) and
        `_why_active` gives a reason. A call it judges and allows may only read."""
        if "PreToolUse" not in self.points:
            return False
        names = names_of(context.tool_name, context.tool_args, context.metadata)
        if not ((not names and self.matches(None)) or any(self.matches(n) for n in names)):
            return False
        return self._why_active(context) is not None

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


def holds_over(runner: Any, context: HookContext) -> bool:
    """Whether a `readonly_guard` of `runner` (a run's hook runner: its own chain and, for a
    delegate or a workflow's run, its callers' chains, `fim.hooks.stacked.Stacked`) judges
    the call `context`: the call then runs read-only in the database too (the database
    tools ask this as the statement runs), so what the guard allows and what the database
    lets the statement do cannot disagree. False for no runner or one without hooks."""
    # deferred: fim.hooks.runner loads fim.events (tens of ms); `fim validate` loads this
    from fim.hooks.runner import HookChain
    from fim.hooks.stacked import Stacked

    if isinstance(runner, Stacked):
        return holds_over(runner.outer, context) or holds_over(runner.inner, context)
    if isinstance(runner, HookChain):
        return any(isinstance(h, ReadonlyGuard) and h.judges(context) for h in runner.hooks)
    return False


HOOK = ReadonlyGuard
