"""A reload's candidate project whose Python the server has not imported yet is checked in
a short-lived child process first (attack-43 #4: a rejected edit's module had run in the
server, and could turn its authentication off while `/v1/status` showed the old snapshot).

`first_imports_refused` gates the compiling thread's imports of project modules this
process does not hold yet; `vet_in_child` compiles the whole project in a `python -I`
child (`fim.build.compile.vet_main`) and returns its problems. `fim.build.compile` decides
when either is used.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fim.config.interpolate import base_env
from fim.errors import Problem

VET_TIMEOUT_S = 120.0
"""How long `vet_in_child` waits for the child's compile (its imports of the project's
modules included) before the candidate is rejected."""

_PROJECT_PACKAGES = "fim_project_hooks_"
"""The prefix of the packages the project's modules are imported under
(`fim.hooks.python_hooks.PACKAGE_PREFIX`)."""


class _FirstImports(importlib.abc.MetaPathFinder):
    """On sys.meta_path ahead of the finder of the project's modules: while a compile thread
    has it on (`first_imports_refused`), a project module not imported into this process
    yet is refused (recorded; nothing of it runs). Other threads, and modules imported
    already (their code ran when a checked snapshot was accepted), are not affected."""

    def __init__(self) -> None:
        self.local = threading.local()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: object = None,
    ) -> importlib.machinery.ModuleSpec | None:
        refused: list[str] | None = getattr(self.local, "refused", None)
        if refused is None or not fullname.startswith(_PROJECT_PACKAGES):
            return None
        refused.append(fullname)
        raise ImportError(f"{fullname} is imported once a child process checked it", name=fullname)


_GATE = _FirstImports()
_GATE_LOCK = threading.Lock()


@contextmanager
def first_imports_refused() -> Iterator[list[str]]:
    """The project modules this thread's imports asked for and were refused (see
    `_FirstImports`). The gate goes on sys.meta_path once, just before the pinned modules'
    finder (put there first if the process never imported one), and stays: taking a finder
    out while another thread walks the list could make that thread miss one."""
    # deferred: the loader of the project's modules sits a layer below, loaded with the hooks
    from fim.hooks import python_hooks

    with _GATE_LOCK:
        finders = sys.meta_path
        if python_hooks._FINDER not in finders:
            finders.append(python_hooks._FINDER)
        if _GATE not in finders:
            finders.insert(finders.index(python_hooks._FINDER), _GATE)
    refused: list[str] = []
    _GATE.local.refused = refused
    try:
        yield refused
    finally:
        _GATE.local.refused = None


_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from fim.build.compile import vet_main; vet_main()"
)


def vet_in_child(root: Path) -> list[Problem]:
    """Compile the project at `root` in a short-lived `python -I` child (this fim's code,
    started with only the environment a hook gets; the rest of this process's variables
    reach it through a pipe, not its `/proc/<pid>/environ`): its problems, the project's
    Python imported there, never here. Its output and the modules' prints are dropped."""
    # deferred: the package's own location, where the child imports the same fim from
    import fim

    base = str(Path(fim.__file__).resolve().parent.parent)
    request = json.dumps({"root": str(root), "env": dict(os.environ)})
    started = {name: value for name, value in os.environ.items() if base_env(name)}
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD, base],
            input=request.encode(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the modules' own output, perhaps with a secret
            env=started,
            cwd=root,
            timeout=VET_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return [child_problem(f"did not finish within {VET_TIMEOUT_S:g} s")]
    except OSError as exc:
        return [child_problem(f"could not start: {exc.strerror or exc}")]
    try:
        return [Problem(**p) for p in json.loads(done.stdout.decode())]
    except (ValueError, TypeError):
        return [child_problem(f"failed with exit status {done.returncode}")]


def child_problem(what: str) -> Problem:
    return Problem(
        "fim.yaml",
        1,
        1,
        f"the check of the project's Python in a child process {what}",
        "a module's top-level code must finish quickly; try `fim validate`",
    )
