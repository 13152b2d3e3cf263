"""`rate_limit`: at most `max_calls` per `window` seconds, per agent and tool (or connector).
The agent is the one whose file declares the hook: what its delegates and the workflows it
starts call counts too, so the limit cannot be multiplied by delegating.

A model stuck in a loop can hammer a paid API or a fragile internal service hundreds of
times a minute; the limit is a sliding window kept in the process's `Services`, so it
holds across the runs one server handles, not just within one conversation.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from fim.hooks.base import PreToolUseHook
from fim.types import HookContext, HookResult
from fim.windows import admit


class RateLimitOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_calls: int = Field(ge=1)
    """Calls allowed inside one window."""
    window: float = Field(default=60.0, gt=0)
    """Window length in seconds."""
    per: Literal["tool", "connector"] = "tool"
    """Count per tool name, or per connector (all actions of a connector share a budget)."""


class RateLimit(PreToolUseHook):
    Options: ClassVar[type[BaseModel]] = RateLimitOptions
    priority = 20
    clock: Callable[[], float] = staticmethod(time.monotonic)
    """Seconds from a monotonic clock; replaceable (tests slide the window without waiting)."""

    def _windows(self) -> dict[tuple[str, ...], deque[float]]:
        if self.run_context is None:
            # Without a run (a hook tested on its own) the window lives on the hook.
            if not hasattr(self, "_own"):
                self._own: dict[tuple[str, ...], deque[float]] = {}
            return self._own
        return self.run_context.services.get("hooks.rate_limit", dict)

    async def __call__(self, context: HookContext) -> HookResult:
        opts: RateLimitOptions = self.options
        target = context.tool_name or ""
        if opts.per == "connector":
            target = str(context.metadata.get("connector") or target)
        # the agent whose file declares the hook, not the one making the call: the
        # caller's hooks hold in its delegates and workflows (`Stacked`), where the call's
        # agent is the delegate's or the workflow's name, a new window each
        owner = self.run_context.agent.name if self.run_context is not None else context.agent
        key = (owner, opts.per, target, str(opts.max_calls), f"{opts.window:g}")
        calls = self._windows().setdefault(key, deque())
        wait = admit(calls, opts.max_calls, opts.window, self.clock())
        if wait is not None:
            what = f"connector '{target}'" if opts.per == "connector" else f"'{target}'"
            return HookResult(
                allow=False,
                error=f"rate limit reached: agent '{owner}' may call {what} at most "
                f"{opts.max_calls} times per {opts.window:g}s. Wait about {wait:.0f}s, or "
                "work with the results you already have",
            )
        return HookResult(side_effects=[f"call {len(calls)}/{opts.max_calls} in window"])


HOOK = RateLimit
