"""`fim ARGS` run inside the test process, answered like `subprocess.run(..., text=True,
capture_output=True)`: a test about what a command prints, exits with or writes keeps its
assertions and saves the ~0.25 s of CPU (~0.7 s for a command that starts a run) a
`python -m fim.cli` process costs.

It calls the real entry point, `fim.cli.main()` (the project commands' one-module app and
`_run`'s one line per problem included), with `sys.argv` set, stdin/stdout/stderr swapped
for buffers by click's `CliRunner.isolation`, and puts back what a command may change in
the process it runs in: the working directory, `os.environ` (whole), `sys.argv`, the
logging configuration (`fim serve` calls `logging.basicConfig(force=True)`), SIGINT and
SIGTERM handlers, `gc.freeze()` (the project commands freeze the heap for a fast exit) and
`fim.observe`'s cached tracing switch. The store's deferred writes that a command's exit
would flush (`fim.store.writer`'s atexit hook) are flushed for the writers it opened.
One visible difference: click names the program after this process (a usage line reads
`python -m pytest.fim`, not `python -m fim.cli`).

Tests about the process itself stay subprocesses: signals, interpreter start-up and
imports, a real terminal or pipe, environment inheritance, atexit behaviour, crashes
(a segfault must fail one test, not kill a worker), hangs (no timeout in-process),
`fim serve` workers and replicas.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from click.testing import CliRunner

_LOCK = threading.Lock()
"""One in-process command at a time: the swapped streams, cwd and environment are the
process's."""


def run_fim(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`fim ARGS` as `subprocess.run([sys.executable, "-m", "fim.cli", *ARGS], cwd=cwd,
    env=env, input=input, capture_output=True, text=True, timeout=timeout)` answers, run
    in this process.

    `env` replaces the whole environment for the command, as a subprocess's does. An
    exception that escapes `main()` is printed to stderr as a traceback with exit code 1,
    as the interpreter would. The command runs on a thread of its own (its own event loop;
    no signal handlers, as off the main thread), so a command that never ends (a `fim
    serve` that should have refused to start) raises `subprocess.TimeoutExpired` after
    `timeout` instead of hanging the test; that thread is a daemon, left running."""
    argv = [sys.executable, "-m", "fim.cli", *args]
    isolated = CliRunner().isolation(input=input or "")
    with _LOCK, _restored(cwd, env), isolated as (out, err, _mixed):
        sys.argv = ["fim", *args]
        codes: list[int] = []
        command = threading.Thread(target=lambda: codes.append(_main()), name="fim", daemon=True)
        command.start()
        command.join(timeout)
        sys.stdout.flush()
        sys.stderr.flush()
        stdout = out.getvalue().decode()
        stderr = err.getvalue().decode(errors="backslashreplace")
    if not codes:
        raise subprocess.TimeoutExpired(argv, timeout or 0, stdout, stderr)
    return subprocess.CompletedProcess(argv, codes[0], stdout, stderr)


def _main() -> int:
    # deferred: fim.cli is imported by the command, as `python -m fim.cli` would
    from fim.cli import main

    try:
        main()
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except BaseException:  # what the interpreter prints for one that escapes
        sys.stderr.write(traceback.format_exc())
        return 1
    return 0


@contextmanager
def _restored(cwd: Path | str | None, env: Mapping[str, str] | None) -> Iterator[None]:
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_argv = list(sys.argv)
    frozen = gc.get_freeze_count()
    gc_enabled = gc.isenabled()
    in_main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    logs = _logging_state()
    tracing = _tracing_switch()
    writers = _store_writers()
    if env is not None:
        _set_environ(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        _close_new_writers(writers)
        os.chdir(saved_cwd)
        _set_environ(saved_env)
        sys.argv = saved_argv
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        _restore_logging(logs)
        _restore_tracing_switch(tracing)
        if frozen == 0 and gc.get_freeze_count():
            gc.unfreeze()  # what the command froze goes back to the collector
        if gc_enabled and not gc.isenabled():
            gc.enable()


def _set_environ(wanted: Mapping[str, str]) -> None:
    for key in [k for k in os.environ if k not in wanted]:
        del os.environ[key]
    for key, value in wanted.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _logging_state() -> dict[logging.Logger, tuple[list[logging.Handler], int, bool, bool]]:
    loggers = [logging.getLogger()]
    loggers += [
        v for v in logging.root.manager.loggerDict.values() if isinstance(v, logging.Logger)
    ]
    return {lg: (list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in loggers}


def _restore_logging(
    saved: dict[logging.Logger, tuple[list[logging.Handler], int, bool, bool]],
) -> None:
    for lg in [logging.getLogger(), *logging.root.manager.loggerDict.values()]:
        if not isinstance(lg, logging.Logger):
            continue
        if lg in saved:
            handlers, level, propagate, disabled = saved[lg]
            for handler in lg.handlers:
                if handler not in handlers:
                    handler.close()
            lg.handlers[:] = handlers
            lg.level, lg.propagate, lg.disabled = level, propagate, disabled
        else:  # a logger the command made: drop handlers it added (they hold its buffers)
            for handler in list(lg.handlers):
                if not isinstance(handler, logging.NullHandler):
                    lg.removeHandler(handler)
                    handler.close()


def _tracing_switch() -> Any:
    observe = sys.modules.get("fim.observe")
    return getattr(observe, "_enabled", None) if observe is not None else None


def _restore_tracing_switch(value: Any) -> None:
    observe = sys.modules.get("fim.observe")
    if observe is not None:
        observe._enabled = value  # type: ignore[attr-defined]


def _store_writers() -> list[Any]:
    writer = sys.modules.get("fim.store.writer")
    return list(writer._WRITERS) if writer is not None else []  # type: ignore[attr-defined]


def _close_new_writers(before: list[Any]) -> None:
    """What `fim.store.writer`'s atexit hook does at a command's exit, for its writers only."""
    writer = sys.modules.get("fim.store.writer")
    if writer is None:
        return
    for each in list(writer._WRITERS):  # type: ignore[attr-defined]
        if not any(each is known for known in before):
            each.close()
