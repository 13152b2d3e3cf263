"""Hooks: per-agent guarantees that run outside the model's loop (DESIGN §4).

Users subclass `PreToolUseHook`, `PostToolUseHook` or `SessionStartHook` in the project's
hooks/*.py; the engine gets one `HookRunner` per run from `build_hooks(ctx)`, and the
compiler reports unbuildable declarations through `check_hooks(snapshot)`.
"""

from __future__ import annotations

from fim.hooks.base import (
    BaseHook,
    HookBuildError,
    PostToolUseHook,
    PreToolUseHook,
    SessionStartHook,
)
from fim.hooks.build import build_hooks, check_hooks
from fim.types import HookContext, HookResult


def __getattr__(name: str) -> object:
    """HookChain/NoHooks load the runner (and asyncio) only when a run needs them, so the
    compiler's hook check stays light."""
    if name == "HookChain":
        # deferred: lazy attribute, loaded on first use
        from fim.hooks import runner

        return runner.HookChain
    if name == "NoHooks":
        # deferred: lazy attribute, loaded on first use
        from fim.events import NoHooks

        return NoHooks
    raise AttributeError(f"module 'fim.hooks' has no attribute {name!r}")


__all__ = [
    "BaseHook",
    "HookBuildError",
    "HookChain",
    "HookContext",
    "HookResult",
    "NoHooks",
    "PostToolUseHook",
    "PreToolUseHook",
    "SessionStartHook",
    "build_hooks",
    "check_hooks",
]
