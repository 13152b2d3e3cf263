"""The project's own Python modules (files of its hooks folder) as python tools and `python:`
eval assertions find them: loaded by the loader handed in (`fim.hooks.python_hooks.load_module`
sits a layer above), its failure worded for a module rather than a hook, and the functions a
module defines for "did you mean" hints. One place for both users of that loader."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot

LoadModule = Callable[["Snapshot", str], ModuleType]
"""`load_module(snapshot, "checks")`: the module `hooks/checks.py` of that snapshot."""


class ModuleLoadError(Exception):
    """The module could not be loaded: what went wrong and, when the loader knows, a hint."""

    def __init__(self, detail: str, hint: str | None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.hint = hint


def project_module(snapshot: Snapshot, name: str, load_module: LoadModule) -> ModuleType:
    """The project module `name`, or ModuleLoadError with the loader's words for it."""
    try:
        return load_module(snapshot, name)
    except Exception as exc:  # the loader's HookBuildError, worded for a python hook
        detail = str(getattr(exc, "message", None) or exc).replace("python hook module", "module")
        raise ModuleLoadError(detail, getattr(exc, "hint", None)) from None


def functions_of(module: ModuleType) -> list[str]:
    """The public functions `module` itself defines (not those it imports), sorted."""
    return sorted(
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    )
