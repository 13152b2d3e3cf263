"""Loading `python: module:Class` hooks from the project's hooks/ folder.

Modules are loaded by file path (hooks/redact.py, hooks/pkg/mod.py), not through
sys.path, so a project's `redact.py` can never shadow or be shadowed by an installed
package. Each snapshot gets a fresh module object (keyed by the file's content), so an
edited hook file takes effect on the next reload while runs in flight keep the old class.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from fim.hooks.base import BaseHook, HookBuildError

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot

_MODULES: dict[tuple[str, str, str], ModuleType] = {}
_MAX_CACHED = 256
_COUNTER = itertools.count(1)


def hooks_dir(snapshot: Snapshot) -> Path:
    return Path(snapshot.root) / snapshot.project.paths.hooks


def split_ref(ref: str) -> tuple[str, str]:
    module, sep, cls = ref.partition(":")
    module = module.strip().removesuffix(".py")
    if not sep or not module or not cls.strip():
        raise HookBuildError(
            f"python hook '{ref}' must be written as module:Class",
            hint="e.g. python: redact:RedactEmails for class RedactEmails in hooks/redact.py",
        )
    return module, cls.strip()


def load_module(snapshot: Snapshot, module: str) -> ModuleType:
    """Import hooks/<module>.py (dots are folders); one module per snapshot and content."""
    folder = hooks_dir(snapshot)
    path = folder.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        available = sorted(p.stem for p in folder.glob("*.py")) if folder.is_dir() else []
        raise HookBuildError(
            f"python hook module '{module}' not found: there is no "
            f"{path.relative_to(snapshot.root) if path.is_relative_to(snapshot.root) else path}",
            hint=f"modules in {snapshot.project.paths.hooks}/: {', '.join(available) or 'none'}",
        )
    source = path.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    key = (str(path), digest, snapshot.version)
    if key in _MODULES:
        return _MODULES[key]
    name = f"fim_project_hooks_{next(_COUNTER)}_{digest}.{module}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise HookBuildError(f"cannot load python hook module {path}")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(loaded)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise HookBuildError(
            f"python hook module {path.name} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    if len(_MODULES) >= _MAX_CACHED:
        old = next(iter(_MODULES))
        sys.modules.pop(_MODULES.pop(old).__name__, None)
    _MODULES[key] = loaded
    return loaded


def load_class(snapshot: Snapshot, ref: str) -> type[BaseHook]:
    """The hook class named by `module:Class`, checked to be a fim hook class."""
    module_name, class_name = split_ref(ref)
    module = load_module(snapshot, module_name)
    cls = getattr(module, class_name, None)
    if cls is None:
        found = sorted(
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, BaseHook) and v.__module__ == module.__name__
        )
        raise HookBuildError(
            f"python hook module '{module_name}' has no class '{class_name}'",
            hint=f"hook classes in it: {', '.join(found) or 'none'}",
        )
    if not (isinstance(cls, type) and issubclass(cls, BaseHook) and hasattr(cls, "point")):
        raise HookBuildError(
            f"'{ref}' is not a hook class",
            hint="subclass fim.hooks.PreToolUseHook, PostToolUseHook or SessionStartHook",
        )
    return cls
