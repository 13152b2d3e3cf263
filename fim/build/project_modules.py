"""The project's own Python modules (files of its hooks folder): pinned in the snapshot at
compile (`pin_modules`), and found by python tools and `python:` eval assertions through the
loader handed in (`fim.hooks.python_hooks.load_module` sits a layer above), its failure worded
for a module rather than a hook, with the functions a module defines for "did you mean"
hints. One place for every user of that loader.

Pinned as prompt files are (`fim.build.prompt_files`): the compile reads every `*.py` of the
hooks folder once, the bytes go into `Snapshot.modules` and the snapshot's version, and the
loader executes those bytes, never the disk. A run holds the hook, tool and output-schema
code its snapshot checked; an edit reaches runs only through a reload that checked it (a
rejected edit never runs), and a `snapshot_version` in a run record names the code that ran.
"""

from __future__ import annotations

import errno
import inspect
import os
import posixpath
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from fim.config.files import read_regular
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.declarations import Declarations

MAX_MODULE_BYTES = 8 * 2**20
"""The most of one Python file of the hooks folder fim pins (8 MiB: far past any hook)."""

_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})

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


def import_failure(exc: BaseException, base: Path, folder: str) -> str:
    """`exc`, raised while a module of the hooks folder `base` (spelt `folder` in the
    project) was executed, as `SyntaxError: invalid syntax, at hooks/mytools.py:10:5`:
    with the line of the project's file it came from (a SyntaxError's own position, else
    the innermost traceback frame in that folder), so an editor jumps there; without
    one when it came from elsewhere."""
    spot = None
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        spot = _in_folder(exc.filename, base, folder)
        if spot is not None:
            return f"{type(exc).__name__}: {exc.msg}, at {spot}:{exc.lineno}:{exc.offset or 1}"
    tb = exc.__traceback__
    while tb is not None:
        here = _in_folder(tb.tb_frame.f_code.co_filename, base, folder)
        spot = f"{here}:{tb.tb_lineno}" if here is not None else spot
        tb = tb.tb_next
    return f"{type(exc).__name__}: {exc}" + (f", at {spot}" if spot else "")


def _in_folder(filename: str, base: Path, folder: str) -> str | None:
    """`filename` as the project spells it (`hooks/mytools.py`) when it is in `base`."""
    try:
        rel = Path(filename).relative_to(base)
    except ValueError:
        return None
    return f"{posixpath.normpath(folder)}/{rel.as_posix()}"


def module_key(folder: str, module: str) -> str:
    """The key of the module `pkg.mod` in `Snapshot.modules`: `hooks/pkg/mod.py` (the hooks
    folder as fim.yaml names it, normalized), the one spelling compile and loader share."""
    return f"{posixpath.normpath(folder)}/{module.replace('.', '/')}.py"


def read_modules(root: Path, hooks: str) -> tuple[dict[str, bytes], list[Problem]]:
    """Every `*.py` file under the hooks folder `hooks` of the project at `root` (not
    hidden, not in `__pycache__`, folders not followed through links) by its key
    (`module_key`), and a problem for each one that cannot be read."""
    folder = posixpath.normpath(hooks)
    base = Path(root) / folder
    found: list[str] = []
    for here, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and d not in _SKIPPED_DIRS
        )
        found += [os.path.join(here, f) for f in filenames if f.endswith(".py")]
    modules: dict[str, bytes] = {}
    problems: list[Problem] = []
    for path in sorted(p for p in found if not os.path.basename(p).startswith(".")):
        rel = f"{folder}/{Path(path).relative_to(base).as_posix()}"
        try:
            modules[rel], _ = read_regular(path, MAX_MODULE_BYTES)
        except OSError as exc:
            too_big = exc.errno == errno.EFBIG
            why = "larger than 8 MiB, the most fim pins of one module" if too_big else None
            problems.append(
                Problem(
                    rel,
                    1,
                    1,
                    f"cannot read this python module: {why or exc.strerror or exc}",
                    "every .py file of the hooks folder is part of the snapshot; fix or remove it",
                )
            )
    return modules, problems


def pin_modules(decls: Declarations) -> dict[str, bytes]:
    """The Python files of the hooks folder (`read_modules`), read once at compile: the
    bytes every later import of a project module executes. Each goes into the snapshot's
    version (`decls.digest`), so an edit of a hook alone is a new snapshot a reload swaps
    in. A file that cannot be read is a problem of the compile: a module a hook imports
    must never be missing silently."""
    modules, problems = read_modules(decls.root, decls.folder("hook"))
    reported = {p.path for p in decls.problems}  # the loader's (a broken link): not twice
    decls.problems += [p for p in problems if p.path not in reported]
    for rel, raw in modules.items():
        decls.digest.update(f"module:{rel}\0{len(raw)}\0".encode(errors="surrogateescape"))
        decls.digest.update(raw)
    return modules


def functions_of(module: ModuleType) -> list[str]:
    """The public functions `module` itself defines (not those it imports), sorted."""
    return sorted(
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    )
