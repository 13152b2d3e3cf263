"""A reload's candidate project whose Python the server has not imported yet is checked in
a short-lived child process first (attack-43 #4: a rejected edit's module had run in the
server, and could turn its authentication off while `/v1/status` showed the old snapshot).

`first_imports_refused` gates the compiling thread's imports of project modules this
process does not hold yet; `vet_in_child` compiles the whole project in a `python -I`
child (`vet_main`) and returns its problems. `fim.build.compile` decides when either is
used.

The child guards against mistakes (a module that raises, exits, hangs or a partial edit),
not against hostile code: a module can tell it runs in the child and behave there. What
reaches the served tree is reviewed (the GitOps trust model).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.config.interpolate import base_env
from fim.errors import ConfigError, Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot

VET_TIMEOUT_S = 30.0
"""How long `vet_in_child` waits for the child's compile (its imports of the project's
modules included) before the candidate is rejected and the child's session killed."""

VET_MEMORY_BYTES = 2 * 2**30
"""The child's address space (`RLIMIT_AS`, 2 GiB): a compile takes a fraction of it."""


class _FirstImports(importlib.abc.MetaPathFinder):
    """On sys.meta_path ahead of the finder of the project's modules: while a compile thread
    has it on (`first_imports_refused`), a project module not imported into this process
    yet is refused (recorded; nothing of it runs). Other threads, and modules imported
    already (their code ran when a checked snapshot was accepted), are not affected."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.prefix = "\0"
        """The prefix of the project's module packages (set before the gate is installed)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: object = None,
    ) -> importlib.machinery.ModuleSpec | None:
        refused: list[str] | None = getattr(self.local, "refused", None)
        if refused is None or not fullname.startswith(self.prefix):
            return None
        refused.append(fullname)
        raise ImportError(f"{fullname} is imported once a child process checked it", name=fullname)


_GATE = _FirstImports()
_GATE_LOCK = threading.Lock()


@contextmanager
def first_imports_refused() -> Iterator[list[str]]:
    """The project modules this thread's imports asked for and were refused (see
    `_FirstImports`), the gate put once just before the pinned modules' finder
    (`fim.hooks.python_hooks.before_pinned`)."""
    # deferred: the loader of the project's modules, loaded with the first hook it builds
    from fim.hooks.python_hooks import PACKAGE_PREFIX, before_pinned

    with _GATE_LOCK:
        _GATE.prefix = PACKAGE_PREFIX
        before_pinned(_GATE)
    refused: list[str] = []
    _GATE.local.refused = refused
    try:
        yield refused
    finally:
        _GATE.local.refused = None


_CHILD = (
    "import json, sys; request = json.loads(sys.stdin.buffer.read()); "
    "sys.path[:] = request['path']; "
    "from fim.build.compile import compile_project; from fim.build.vet import vet_main; "
    "vet_main(request, compile_project)"
)
"""The child's entry: the import path first (this process's, from the request: `-I` left out
PYTHONPATH and the user's site-packages, where a server's dependencies may come from),
then this fim's compile."""


def vet_in_child(snapshot: Snapshot) -> list[Problem]:
    """Compile the project of `snapshot` in a short-lived `python -I` child (this fim's code,
    started with only the environment a hook gets; the rest of this process's variables
    reach it through a pipe, not its `/proc/<pid>/environ`): its problems, the project's
    Python imported there, never here. Its output and the modules' prints are dropped.

    The child reads the files again: one changed since `snapshot` pinned them (an editor's
    second save, a checkout halfway through) would have it pass bytes this process never
    imports. So the child answers with the `fingerprint` of what it compiled, and a
    different one rejects the candidate (the watcher sees the later change and reloads).
    The child runs in a session of its own, killed whole once it answered or timed out:
    a module that forks at import leaves nothing behind."""
    request = json.dumps(
        {
            "root": str(snapshot.root),
            "env": dict(os.environ),
            "path": _child_path(),
            "timeout": VET_TIMEOUT_S,
        }
    )
    started = {name: value for name, value in os.environ.items() if base_env(name)}
    with tempfile.TemporaryFile() as out:  # not a pipe: a forked module may hold it open
        try:
            child = subprocess.Popen(
                [sys.executable, "-I", "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.DEVNULL,  # the modules' own output, perhaps with a secret
                env=started,
                cwd=snapshot.root,
                start_new_session=True,
            )
        except OSError as exc:
            return [child_problem(f"could not start: {exc.strerror or exc}")]
        try:
            child.communicate(request.encode(), timeout=VET_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return [child_problem(f"did not finish within {VET_TIMEOUT_S:g} s")]
        finally:
            _end_session(child)
        out.seek(0)
        answer = out.read()
    try:
        reply = json.loads(answer.decode())
        problems = [Problem(**p) for p in reply["problems"]]
        checked = reply["checked"]
    except (ValueError, TypeError, KeyError):
        return [child_problem(f"failed with exit status {child.returncode}")]
    if problems or checked == fingerprint(snapshot):
        return problems
    return [
        Problem(
            "fim.yaml",
            1,
            1,
            "the project's files changed while a child process checked its Python",
            "the next reload checks them again once the files stop changing",
        )
    ]


def _child_path() -> list[str]:
    """This process's `sys.path` for the child, this fim's location first. `''` (this
    process's folder) becomes that folder's path: in the child it would name the
    project's folder, where `-I` keeps a file from shadowing a module. Other entries are
    absolute, or keys of import hooks (an editable install's), passed as they are."""
    # deferred: the package's own location, where the child imports the same fim from
    import fim

    base = str(Path(fim.__file__).resolve().parent.parent)
    try:
        here = os.getcwd()
    except OSError:  # removed under this process: its `''` finds nothing
        here = ""
    kept = [here if p == "" else p for p in sys.path]
    return [base, *(p for p in kept if p and p != base)]


def _end_session(child: subprocess.Popen[bytes]) -> None:
    """Kill the child's session (its process group: whatever a module started), then reap
    the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def fingerprint(snapshot: Snapshot) -> str:
    """What the child checked, as this process compares it: the snapshot's version (every
    file read, the YAML included) and the full digest of its Python files' bytes."""
    digest = hashlib.sha256(f"{snapshot.version}\0".encode())
    for rel in sorted(snapshot.modules):
        raw = snapshot.modules[rel]
        digest.update(f"{rel}\0{len(raw)}\0".encode(errors="surrogateescape"))
        digest.update(raw)
    return digest.hexdigest()


def vet_main(request: dict[str, Any], compile_project: Callable[[str], Snapshot]) -> None:
    """The child of `vet_in_child`: not dumpable, its address space capped, ended by an
    alarm soon after the parent stops waiting, the variables from `request`; the compile's
    problems and `fingerprint` as JSON on the stdout it started with (the modules' own
    prints go nowhere). `compile_project` is handed in by the child's entry:
    `fim.build.compile` imports this module."""
    # deferred: only the child needs it
    from fim.environ import not_dumpable

    not_dumpable()
    _cap_memory()
    # past the parent's wait, SIGALRM ends it: a child its parent could not kill (the
    # server stopped during the check) does not hang on forever
    signal.alarm(math.ceil(request["timeout"]) + 5)
    os.environ.update(request["env"])
    out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    checked = None
    try:
        checked = fingerprint(compile_project(request["root"]))
        problems: list[Problem] = []
    except ConfigError as exc:
        problems = exc.problems
    except BaseException as exc:  # the project's Python ended the compile: its problem
        problems = [child_problem(f"failed: {type(exc).__name__}: {exc}")]
    out.write(json.dumps({"problems": [p.as_dict() for p in problems], "checked": checked}))
    out.flush()
    os._exit(0)


def _cap_memory() -> None:
    """At most `VET_MEMORY_BYTES` of address space for the child (never raised past a lower
    limit it inherited): a module that allocates without end fails there with MemoryError,
    it does not exhaust the host on each reload."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = VET_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(hard, VET_MEMORY_BYTES)
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    with contextlib.suppress(ValueError, OSError):  # a platform that does not enforce it
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def child_problem(what: str) -> Problem:
    return Problem(
        "fim.yaml",
        1,
        1,
        f"the check of the project's Python in a child process {what}",
        "a module's top-level code must finish quickly; try `fim validate`",
    )
