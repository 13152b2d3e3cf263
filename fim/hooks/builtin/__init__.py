"""Builtin hooks, discovered from this folder: one hook per file, named by the file stem.

A builtin is registered the way a user's hook is: drop a file here that defines `HOOK`, a
subclass of one of the point classes in `fim.hooks.base` (with an `Options` model when it
takes `with:` options). The compiler lists the folder (`names()`, no import) to check
`use:` in agent files; a run imports only the builtins its agent uses. Files starting
with `_` are helpers, not hooks.
"""

from __future__ import annotations

import difflib
import importlib

from fim.hooks.base import BaseHook, HookBuildError
from fim.run.discovery import module_names


def names() -> list[str]:
    """Every builtin hook name, found by listing the package folder without importing."""
    return module_names(__path__)


def load(name: str) -> type[BaseHook]:
    """The hook class of builtin `name`, or a HookBuildError naming the valid ones."""
    available = names()
    if name not in available:
        close = difflib.get_close_matches(name, available, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise HookBuildError(
            f"unknown builtin hook '{name}'", hint=f"{hint}builtin hooks: {', '.join(available)}"
        )
    module = importlib.import_module(f"{__name__}.{name}")
    hook = getattr(module, "HOOK", None)
    if not (isinstance(hook, type) and issubclass(hook, BaseHook)):
        raise HookBuildError(
            f"builtin hook module '{name}' defines no HOOK class",
            hint=f"set HOOK to a subclass of a fim.hooks.base point class in {module.__file__}",
        )
    return hook
