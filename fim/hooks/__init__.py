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
from fim.hooks.runner import HookChain, NoHooks
from fim.types import HookContext, HookResult

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
