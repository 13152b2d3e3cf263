"""Loading `python: module:Class` hooks (and `module:function` tools, `output_schema:
module:Class`, `python:` eval assertions) from the project's hooks/ folder.

The code that runs is the code the snapshot pinned: the compile read every `*.py` of the
hooks folder into `Snapshot.modules` (`fim.build.project_modules.pin_modules`), and a module
is executed from those bytes (`compile(source, path, "exec")`), never read from the disk
here. So an edited hook file reaches runs only through a reload that checked it: a rejected
edit never runs, runs of a snapshot keep its code until they end, and the
`snapshot_version` a run records names the code that ran. A module the snapshot does not
hold is a HookBuildError (hooks fail closed).

Modules live in a package of their own per set of pinned files
(`fim_project_hooks_<digest>`), not on sys.path, so a project's `redact.py` can never
shadow or be shadowed by an installed package. A module imports its neighbours relatively
(`from . import helpers`, `from .pkg.mod import x`), served from the same snapshot by
`_PinnedFinder`. An absolute import of a file of the hooks folder (`import helpers` with
the folder put on PYTHONPATH) would read the disk: executing a module that does is refused
with a hint to import relatively. Code outside the hooks folder is imported as any
installed library is (Python reads it once per process; it is not part of the snapshot).

Module objects are cached by (module, digest of the pinned set): a run builds its chain
from the cache (no file read, no hash, no exec); a reload that changes no Python file
keeps the same module objects, one that changes any gets fresh ones.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from fim.build.project_modules import import_failure, module_key
from fim.hooks.base import BaseHook, HookBuildError

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot

PACKAGE_PREFIX = "fim_project_hooks_"
_MAX_SETS = 16
"""Sets of pinned modules kept imported (a set per distinct hooks folder content); the
oldest is dropped from sys.modules past this, and imported again if a run still asks."""


@dataclass(frozen=True)
class _Pinned:
    """The pinned Python files of one snapshot, as the import system is served them."""

    package: str
    folder: str
    """The hooks folder relative to the root, normalized (`hooks`)."""
    base: Path
    """The hooks folder's absolute path: what `__file__` and tracebacks name."""
    modules: Mapping[str, bytes]

    def spec(self, fullname: str) -> importlib.machinery.ModuleSpec | None:
        dotted = fullname[len(self.package) + 1 :] if fullname != self.package else ""
        if not dotted:
            return self._package(fullname)
        parts = dotted.split(".")
        stem = f"{self.folder}/{'/'.join(parts)}"
        path = self.base.joinpath(*parts)
        if f"{stem}.py" in self.modules:
            return self._spec(fullname, f"{stem}.py", path.with_suffix(".py"), False)
        if f"{stem}/__init__.py" in self.modules:
            return self._spec(fullname, f"{stem}/__init__.py", path / "__init__.py", True)
        if any(key.startswith(f"{stem}/") for key in self.modules):
            return self._package(fullname)  # a folder without __init__.py
        return None

    def _spec(
        self, fullname: str, key: str, path: Path, package: bool
    ) -> importlib.machinery.ModuleSpec:
        spec = importlib.machinery.ModuleSpec(
            fullname, _PinnedLoader(self, key), origin=str(path), is_package=package
        )
        spec.has_location = True  # __file__ names the file, for tracebacks
        return spec

    def _package(self, fullname: str) -> importlib.machinery.ModuleSpec:
        """A folder without `__init__.py` (or the set's own package): an empty package.
        Its `__path__` is empty, as every package here has: no finder of the disk
        (PathFinder) may look for a submodule of it in a folder."""
        spec = importlib.machinery.ModuleSpec(
            fullname, _PinnedLoader(self, None), origin=None, is_package=True
        )
        return spec


class _PinnedLoader(importlib.abc.Loader):
    """Executes a pinned file's bytes into the module; a folder's package is empty."""

    def __init__(self, pinned: _Pinned, key: str | None) -> None:
        self.pinned = pinned
        self.key = key

    def exec_module(self, module: ModuleType) -> None:
        if self.key is None:
            return
        source = self.pinned.modules[self.key]
        origin = module.__spec__.origin if module.__spec__ else None
        code = compile(source, origin or self.key, "exec", dont_inherit=True)
        exec(code, module.__dict__)
        _refuse_disk_imports(self.pinned, self.key, module)


class _PinnedFinder(importlib.abc.MetaPathFinder):
    """Finds `fim_project_hooks_<digest>.*` in the snapshot's pinned files, and only there:
    a name of a set not registered, or a file the snapshot does not hold, is not found."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE_PREFIX):
            return None
        pinned = _SETS.get(fullname.partition(".")[0])
        return pinned.spec(fullname) if pinned is not None else None


class _DiskGuard(importlib.abc.MetaPathFinder):
    """First on sys.meta_path once a set is registered: refuses any module the other finders
    would load from a file inside a registered hooks folder (`import words` with the folder
    on sys.path, `import hooks.words` with the root on it, `hooks` itself as a namespace
    package), however the name is spelled and wherever the import sits (a function's body
    runs it per call, after the module executed). Only the pinned finder serves those
    files; the check costs one search per module never imported before, none for one
    in `sys.modules`."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(PACKAGE_PREFIX) or not _SETS:
            return None
        finders = sys.meta_path
        after = finders[finders.index(self) + 1 :] if self in finders else []
        for finder in after:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is None:
                continue
            _refuse_spec(fullname, spec)
            return spec
        return None


def _inside(location: str | None) -> _Pinned | None:
    """The registered set whose hooks folder holds `location` (a file, or a package's
    folder), seen through links too."""
    if not location:
        return None
    forms = {os.path.abspath(location), os.path.realpath(location)}
    for pinned in reversed(_SETS.values()):
        for base in {str(pinned.base), os.path.realpath(pinned.base)}:
            if any(f == base or f.startswith(base + os.sep) for f in forms):
                return pinned
    return None


def _refuse_spec(fullname: str, spec: importlib.machinery.ModuleSpec) -> None:
    """ImportError when `spec` would read a file of a hooks folder from the disk."""
    locations = [spec.origin if spec.has_location else None]
    locations += list(spec.submodule_search_locations or ())
    for location in locations:
        pinned = _inside(location)
        if pinned is None or location is None:
            continue
        rel = os.path.relpath(os.path.realpath(location), os.path.realpath(pinned.base))
        rel = "" if rel == "." else rel.replace(os.sep, "/")
        importer, line = _importer()
        what = f"{pinned.folder}/{rel}" if rel else f"the folder {pinned.folder}"
        name = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        last = name.rpartition(".")[2] or "<module>"
        raise ImportError(
            f"{importer} imports {what} as '{fullname}' through sys.path{line}, which reads "
            "it from the disk, not from the snapshot; import it relatively: "
            f"from . import {last}, or from .{name or '<module>'} import ...",
            name=fullname,
        )


def _importer() -> tuple[str, str]:
    """The pinned module whose code asks for the import, as the project spells it
    (`hooks/guard.py`), with its line (` at line 3`); or words for code elsewhere."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str) and name.startswith(PACKAGE_PREFIX):
            key = getattr(getattr(frame.f_globals.get("__spec__"), "loader", None), "key", None)
            if isinstance(key, str):
                return key, f" at line {frame.f_lineno}"
        frame = frame.f_back
    return "code outside the hooks folder", ""


_SETS: OrderedDict[str, _Pinned] = OrderedDict()
_FINDER = _PinnedFinder()
_GUARD = _DiskGuard()


def _refuse_disk_imports(pinned: _Pinned, key: str, module: ModuleType) -> None:
    """A module that took a file of the snapshot through sys.path (`import helpers`,
    `from hooks.helpers import x`, with the folder on PYTHONPATH) runs code Python read
    from the disk, not the snapshot's: refused, naming the relative import that is pinned.
    Run once per execution of a module, never per run."""
    inside = str(pinned.base) + os.sep
    for value in list(vars(module).values()):
        source = value if isinstance(value, ModuleType) else None
        if source is None:
            owner = getattr(value, "__module__", None)
            source = sys.modules.get(owner) if isinstance(owner, str) else None
        if source is None or source.__name__.startswith(PACKAGE_PREFIX):
            continue
        file = getattr(source, "__file__", None)
        if file is None:  # a namespace package (`hooks` of `import hooks.words`), if it
            # was imported before the guard (`_DiskGuard`) was in place
            for folder in getattr(source, "__path__", None) or ():
                if os.path.join(os.path.abspath(folder), "").startswith(inside):
                    raise ImportError(
                        f"{key} imports the folder {pinned.folder} as '{source.__name__}' "
                        "through sys.path, which reads its files from the disk, not from "
                        "the snapshot; import them relatively: from . import <module>"
                    )
        if not isinstance(file, str) or not os.path.abspath(file).startswith(inside):
            continue
        rel = os.path.relpath(file, pinned.base).replace(os.sep, "/")
        if f"{pinned.folder}/{rel}" not in pinned.modules:
            continue  # not a file of the snapshot (a virtualenv inside the folder)
        name = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        raise ImportError(
            f"{key} imports {pinned.folder}/{rel} as '{source.__name__}' through "
            "sys.path, which reads it from the disk, not from the snapshot; import it "
            f"relatively: from . import {name.rpartition('.')[2]}, or from .{name} "
            "import ..."
        )


def _install() -> None:
    """The finder of the snapshots' modules on sys.meta_path, and the guard before it."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)  # first: these names are answered from snapshots
    if not sys.meta_path or sys.meta_path[0] is not _GUARD:
        if _GUARD in sys.meta_path:
            sys.meta_path.remove(_GUARD)
        sys.meta_path.insert(0, _GUARD)  # before any finder of the disk


def before_pinned(finder: Any) -> None:
    """Put `finder` on sys.meta_path just before the finder of the project's modules (both
    installed now if none was imported yet): it sees every import of a project module
    first (`fim.build.vet`'s gate). Once: it stays, as taking a finder out while another
    thread walks the list could make that thread miss one."""
    _install()
    if finder not in sys.meta_path:
        sys.meta_path.insert(sys.meta_path.index(_FINDER), finder)


def _package_of(snapshot: Snapshot) -> str:
    """The package the snapshot's modules are imported under, registered with the finder."""
    package = PACKAGE_PREFIX + snapshot.modules_digest
    if package in _SETS:
        _SETS.move_to_end(package)
        return package
    _install()
    _SETS[package] = _Pinned(package, _folder(snapshot), hooks_dir(snapshot), snapshot.modules)
    while len(_SETS) > _MAX_SETS:
        old, _ = _SETS.popitem(last=False)
        for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
            sys.modules.pop(name, None)
    return package


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


def _folder(snapshot: Snapshot) -> str:
    """The hooks folder as the keys of `Snapshot.modules` spell it (`hooks`)."""
    return module_key(snapshot.project.paths.hooks, "x").removesuffix("/x.py")


def _not_found(snapshot: Snapshot, module: str, key: str) -> HookBuildError:
    prefix = _folder(snapshot) + "/"
    available = sorted(
        k[len(prefix) :].removesuffix(".py")
        for k in snapshot.modules
        if k.startswith(prefix) and "/" not in k[len(prefix) :]
    )
    if (Path(snapshot.root) / key).is_file():  # an error path: the disk only explains
        return HookBuildError(
            f"python hook module '{module}' is not in this snapshot: {key} was written "
            "after it was compiled",
            hint="the next reload checks and loads it; runs never read a module from the disk",
        )
    return HookBuildError(
        f"python hook module '{module}' not found: there is no {key}",
        hint=f"modules in {prefix}: {', '.join(available) or 'none'}",
    )


def load_module(snapshot: Snapshot, module: str) -> ModuleType:
    """The module hooks/<module>.py (dots are folders) as `snapshot` pinned it: executed
    from its pinned bytes once per set of pinned files, then served from the cache, and
    held by the snapshot (`Snapshot.loaded`): past `_MAX_SETS` a run on it still never
    executes one again."""
    package = _package_of(snapshot)
    name = f"{package}.{module}"
    loaded = snapshot.loaded.get(module) or sys.modules.get(name)
    if loaded is not None:
        return snapshot.loaded.setdefault(module, loaded)
    key = module_key(snapshot.project.paths.hooks, module)
    if key not in snapshot.modules or any(not p.isidentifier() for p in module.split(".")):
        raise _not_found(snapshot, module, key)
    try:
        return snapshot.loaded.setdefault(module, importlib.import_module(name))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # sys.exit(), GeneratorExit ... at import: the hook's problem
        failure = import_failure(exc, hooks_dir(snapshot), snapshot.project.paths.hooks)
        raise HookBuildError(
            f"python hook module {Path(key).name} failed to import: "
            f"{_unprefixed(failure, package)}",
            hint=_import_hint(snapshot, exc),
        ) from exc


def _unprefixed(text: str, package: str) -> str:
    """A message about a pinned module without fim's private package name in it."""
    return text.replace(package + ".", "").replace(package, "the hooks folder")


def _import_hint(snapshot: Snapshot, exc: BaseException) -> str | None:
    """For `import helpers` (or `from hooks import helpers`) of a file the snapshot holds:
    how to import it so it is found, from the snapshot."""
    missing = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not isinstance(missing, str):
        return None
    folder = _folder(snapshot).replace("/", ".")
    if missing == folder:  # `from hooks import helpers`: the folder is no package
        return "a module of the hooks folder is imported relatively: from . import <module>"
    name = missing.removeprefix(folder + ".") if missing.startswith(folder + ".") else missing
    if module_key(snapshot.project.paths.hooks, name) in snapshot.modules:
        last = name.rpartition(".")[2]
        return (
            f"a module of the hooks folder is imported relatively: from . import {last}, "
            f"or from .{name} import ..."
        )
    return None


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
