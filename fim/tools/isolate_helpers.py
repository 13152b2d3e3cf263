"""multiprocessing's helper processes, started without fim's secrets: the forkserver the
isolate pools fork their workers from, and the resource tracker.

multiprocessing execs both with the C `environ`, which still holds every variable fim
started with (`fim.environ` zeroes only the block the kernel wrote), and an `execve` makes
a process dumpable again. Both live as long as fim, so a command hook or a stdio MCP server
of the same user read `OPENAI_API_KEY` from their `/proc/<pid>/environ` or memory
(attack-28 #1). fim cannot empty its own C environment while other threads may call
`getenv`, so multiprocessing is pointed (`set_executable`, public on its contexts) at a
launcher instead: a shell script in a folder of this process's own (0700, made on first
use, removed at exit) that execs the same Python through `env -i` with an allow-list:

- what a hook gets anyway (PATH, HOME, LANG, LC_*, TMPDIR ...: `base_env`);
- the interpreter's own variables (PYTHONPATH, PYTHONHOME ...: what importing fim needs),
  and LD_LIBRARY_PATH (a Python built with a shared libpython may need it to start);
- `MARKER`, and the launcher's `site` folder ahead on PYTHONPATH: its `sitecustomize` makes
  the helper not dumpable before multiprocessing's code runs, then imports the real
  `sitecustomize` if there is one.

A spawned child goes through it unchanged: its command ends with `--multiprocessing-fork`
(uvicorn's `--workers` children, a library caller's own `spawn` processes), and it execs the
same Python with the whole environment, as multiprocessing did. The helpers' workers empty
their environment anyway (`isolate._init_worker`); the helpers themselves only import
modules. Where no folder allows a script to run (every candidate mounted noexec) or there
is no `env`, nothing changes and a warning says why.
"""

from __future__ import annotations

import os
import sys
import threading

from fim import private

MARKER = "FIM_ISOLATE_HELPER"
"""Set (to "1") only in the helpers' environment: the guards act only where it is."""

PYTHON_ENV = frozenset(
    {
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSAFEPATH",
        "PYTHONPLATLIBDIR",
        "PYTHONNOUSERSITE",
        "PYTHONUSERBASE",
        "PYTHONPYCACHEPREFIX",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUTF8",
        "PYTHONIOENCODING",
        "PYTHONCOERCECLOCALE",
        "PYTHONMALLOC",
        "PYTHONDEVMODE",
        "PYTHONWARNINGS",
        "PYTHONHASHSEED",
        "LD_LIBRARY_PATH",
    }
)
"""Besides `base_env`: what the helpers' Python needs to start and to import fim."""

SITE = '''"""fim: make this multiprocessing helper not dumpable, then run the real sitecustomize."""
import os
import sys

if os.environ.pop("{marker}", None) == "1":
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    _me = sys.modules.pop("sitecustomize")
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        sys.modules["sitecustomize"] = _me
'''

_lock = threading.Lock()
_made: tuple[int, str, str] | None = None
"""(pid, folder, the real executable) of this process's launcher."""


def guard() -> None:
    """In a helper (`MARKER` set) that the `sitecustomize` did not reach (Python run with
    -E, -I or -S): not dumpable. Elsewhere nothing. The first module the forkserver
    imports (`isolate.PRELOAD`) calls it."""
    if os.environ.get(MARKER) == "1":
        # deferred: fim.environ loads ctypes, which only a helper needs here
        from fim.environ import not_dumpable

        not_dumpable()


def use_launcher() -> None:
    """Point multiprocessing at this process's launcher (made again if it went away),
    from now on: a forkserver or resource tracker that multiprocessing starts or restarts
    later starts clean too. Called before each isolate pool starts."""
    if sys.platform == "win32":
        return
    # deferred: multiprocessing costs every start-up a few ms; only a pool needs it
    from multiprocessing import spawn

    with _lock:
        path = _launcher(os.fsdecode(spawn.get_executable()))
        if path is not None:
            spawn.set_executable(path)


def start_tracker_clean() -> None:
    """Start multiprocessing's resource tracker through the launcher, then give
    multiprocessing back its executable: for a process that spawns children (the
    `--workers` supervisor) and must not depend on the launcher's folder (a tmp cleaner)
    for every later spawn. A tracker restarted after it died would hold the environment
    again."""
    if sys.platform == "win32":
        return
    # deferred: multiprocessing costs every start-up a few ms; only this path needs it
    from multiprocessing import resource_tracker, spawn

    with _lock:
        before = spawn.get_executable()
        path = _launcher(os.fsdecode(before))
        if path is None:
            return
        spawn.set_executable(path)
        try:
            resource_tracker.ensure_running()
        finally:
            spawn.set_executable(os.fsdecode(before))


def _launcher(current: str) -> str | None:
    """The launcher's path (made once per process, again if it is gone or no longer this
    user's alone), or None where none can run. `current`: multiprocessing's executable,
    the real Python unless it is already the launcher."""
    global _made
    if _made is not None and _made[0] == os.getpid():
        script = os.path.join(_made[1], "python")
        if private.still_ours(_made[1]) and os.access(script, os.X_OK):
            return script
        current = _made[2]
    elif _made is not None:  # a forked child: the real Python is the parent's
        current = _made[2]
    made = _make(current)
    if made is not None:
        _made = (os.getpid(), made, current)
        return os.path.join(made, "python")
    return None


def _make(python: str) -> str | None:
    # deferred: tempfile, shutil, shlex and the hooks' allow-list are needed only here
    import logging
    import shlex
    import shutil
    import tempfile

    from fim.config.interpolate import base_env

    env_binary = "/usr/bin/env" if os.access("/usr/bin/env", os.X_OK) else shutil.which("env")
    if env_binary is None:
        logging.getLogger("fim.isolate").warning(
            "no `env` program: the isolate pool's helpers start with fim's environment"
        )
        return None
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    for base in (runtime, tempfile.gettempdir()):
        if not base or not os.path.isdir(base):
            continue
        folder = private.process_folder("fim-helpers-", base)
        site = os.path.join(folder, "site")
        os.mkdir(site, 0o700)
        with open(os.path.join(site, "sitecustomize.py"), "w") as out:
            out.write(SITE.format(marker=MARKER))
        kept = {k: v for k, v in os.environ.items() if base_env(k) or k in PYTHON_ENV}
        kept["PYTHONPATH"] = os.pathsep.join(filter(None, [site, kept.get("PYTHONPATH")]))
        kept[MARKER] = "1"
        assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(kept.items()))
        script = os.path.join(folder, "python")
        with open(script, "w") as out:
            out.write(
                "#!/bin/sh\n"
                "# fim's launcher of multiprocessing's helpers (fim/tools/isolate_helpers.py)\n"
                "for last do :; done\n"
                f'if [ "${{last-}}" = --multiprocessing-fork ]; then exec {shlex.quote(python)}'
                ' "$@"; fi\n'
                f'exec {shlex.quote(env_binary)} -i {assignments} {shlex.quote(python)} "$@"\n'
            )
        os.chmod(script, 0o700)
        if os.access(script, os.X_OK):  # false on a noexec mount
            return folder
        shutil.rmtree(folder, ignore_errors=True)
    logging.getLogger("fim.isolate").warning(
        "no folder lets a script run (noexec): the isolate pool's helpers start with "
        "fim's environment"
    )
    return None


guard()
