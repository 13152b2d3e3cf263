"""`confirm`: a human approves a call before it runs.

Applies to connector actions declared `requires_confirmation: true`, or to every tool
matched by the hook with `with: {all: true}`. The call waits on a pending approval in the
state store (so it survives a restart and can be decided from another process) and runs
only if a human approves it before `timeout` seconds; denial and expiry block it with a
reason that tells the model not to retry the same call.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fim.hooks.approval import ask_human
from fim.hooks.base import PreToolUseHook
from fim.types import HookContext, HookResult


class ConfirmOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    all_: bool = Field(default=False, alias="all")
    """Ask for every matched tool, not only actions declared `requires_confirmation`."""
    timeout: float = Field(default=300.0, gt=0)
    """Seconds a human has to decide before the approval expires and the call is blocked."""
    poll: float = Field(default=0.25, gt=0, le=10)
    """Seconds between checks of the state store while waiting."""


class Confirm(PreToolUseHook):
    Options: ClassVar[type[BaseModel]] = ConfirmOptions
    priority = 90

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.timeout = self.options.timeout

    def chain_timeout(self) -> float:
        # The wait for a human is the hook's job; the chain only guards against a hang.
        return max(self.timeout, self.options.timeout) + 10.0

    async def __call__(self, context: HookContext) -> HookResult:
        opts: ConfirmOptions = self.options
        if not (opts.all_ or context.metadata.get("requires_confirmation")):
            return HookResult()
        why = (
            "this agent confirms every call"
            if opts.all_
            else "the action is declared requires_confirmation"
        )
        return await ask_human(self, context, reason=why, timeout=opts.timeout, poll=opts.poll)


HOOK = Confirm
