"""`audit_log`: every tool call of the agent, written to the state store's audit table.

Records agent, tool, arguments (masked), duration and outcome (`allow`, `block`,
`error`). It works from `finish`, which the runner calls after the whole chain of a point
has decided, so a call blocked by *another* hook is audited as `block` with that hook's
reason, and the duration covers the tool alone, not the time spent in other hooks or
waiting for a human.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from fim.hooks.base import PostToolUseHook
from fim.hooks.masking import mask_value
from fim.types import HookContext, HookPoint, HookResult


class AuditLogOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    detail_chars: int = 300
    """How much of an error observation or block reason to keep in `detail`."""


class AuditLog(PostToolUseHook):
    Options: ClassVar[type[BaseModel]] = AuditLogOptions
    also: ClassVar[tuple[HookPoint, ...]] = ("PreToolUse",)
    priority = 0

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._started: dict[Any, deque[float]] = {}

    def _key(self, context: HookContext) -> Any:
        call_id = context.metadata.get("call_id")
        return call_id if call_id else (context.run_id, context.tool_name)

    async def __call__(self, context: HookContext) -> HookResult:
        return HookResult()

    async def finish(self, context: HookContext, result: HookResult) -> None:
        if context.point == "PreToolUse":
            if result.allow:
                self._started.setdefault(self._key(context), deque()).append(time.perf_counter())
                return
            await self._write(context, "block", None, result.error)
            return
        started = self._started.get(self._key(context))
        duration = (time.perf_counter() - started.popleft()) * 1000 if started else None
        if not result.allow:
            await self._write(context, "block", duration, result.error)
        elif context.metadata.get("is_error"):
            await self._write(context, "error", duration, context.tool_result)
        else:
            await self._write(context, "allow", duration, None)

    async def _write(
        self, context: HookContext, outcome: str, duration_ms: float | None, detail: str | None
    ) -> None:
        if self.run_context is None:
            raise RuntimeError("audit_log needs a run (it writes to the project's state store)")
        # deferred: loading fim.store costs tens of ms
        from fim.store import get_store

        mask = self.run_context.snapshot.mask
        limit = self.options.detail_chars
        await get_store(self.run_context.services).audit(
            {
                "run_id": context.run_id,
                "agent": context.agent,
                "tool": context.tool_name or "",
                "args": mask_value(context.tool_args or {}, mask),
                "outcome": outcome,
                "duration_ms": duration_ms,
                "detail": mask(detail)[:limit] if detail else None,
            }
        )


HOOK = AuditLog
