"""Helpers every CLI command module shares: the `--project` option, loading the snapshot,
and turning user mistakes (ConfigError, RunError) into one line each and exit code 1.

Command modules (`fim/commands/<area>.py`) define `register(app)` and keep heavy imports
inside their command functions, so `fim --help` stays fast.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Coroutine, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from fim.errors import ConfigError, Problem, ProjectNotFound, RunError
from fim.terminal import printable

T = TypeVar("T")

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot

ProjectOption = Annotated[
    Path | None,
    typer.Option(
        "--project",
        "-p",
        help="Project directory (default: the nearest parent with fim.yaml).",
        show_default=False,
        file_okay=False,
    ),
]


def project_dir(ctx: typer.Context | None, project: Path | None) -> Path | None:
    """The command's own `--project`, else the global `fim --project DIR`, else None."""
    if project is not None:
        return project
    if ctx is not None:
        obj = ctx.find_root().obj
        if isinstance(obj, dict) and obj.get("project") is not None:
            return obj["project"]
    return None


def run_async(coro: Coroutine[Any, Any, T], *, cancel_on_sigterm: bool = False) -> T:
    """`asyncio.run`, with asyncio imported on first use: `fim --help` loads every command
    module and should not pay for the event loop machinery.

    With `cancel_on_sigterm` (commands that do not handle signals themselves, unlike
    `fim serve`), SIGTERM cancels the command like Ctrl-C does, so `finally` blocks run and
    MCP stdio servers are stopped instead of being orphaned; the exit status is then 143."""
    # deferred: loading asyncio costs a few ms
    import asyncio

    if not cancel_on_sigterm:
        return asyncio.run(coro)

    terminated = False

    async def main() -> T:
        nonlocal terminated
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_term() -> None:
            nonlocal terminated
            terminated = True
            if task is not None:
                task.cancel()

        try:
            loop.add_signal_handler(signal.SIGTERM, on_term)
        except (NotImplementedError, RuntimeError, ValueError):  # not main thread, Windows
            return await coro
        try:
            return await coro
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if terminated:
            raise SystemExit(128 + signal.SIGTERM) from None
        raise


def err(line: str) -> None:
    """One line to stderr (no rich import: this is on the fast path)."""
    # deferred: loading fim.masking costs a few ms
    from fim.masking import known

    sys.stderr.write(printable(known().text(line)) + "\n")


def fail(message: str, hint: str | None = None) -> NoReturn:
    """Stop the command with one line on stderr and exit code 1."""
    err(f"error: {message}" + (f" ({hint})" if hint else ""))
    raise typer.Exit(1)


def print_problems(problems: Iterable[Problem], stream: str = "stderr") -> None:
    out = sys.stdout if stream == "stdout" else sys.stderr
    # deferred: loading fim.masking costs a few ms
    from fim.masking import known

    for problem in problems:  # a message may quote the project's text: no escape sequence
        out.write(printable(known().text(f"{problem}")) + "\n")


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn ConfigError/RunError raised inside the block into lines + exit code 1."""
    try:
        yield
    except ProjectNotFound as exc:  # about no file: there is none
        fail(exc.message, exc.hint)
    except ConfigError as exc:
        print_problems(exc.problems)
        n = len(exc.problems)
        err(f"{n} problem{'s' if n != 1 else ''} found")
        raise typer.Exit(1) from None
    except RunError as exc:
        fail(exc.message, exc.hint)


def load_snapshot(ctx: typer.Context | None, project: Path | None = None) -> Snapshot:
    """Compile the project for a command; user mistakes end the command with exit 1."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.compile import compile_project

    with user_errors():
        snapshot = compile_project(project_dir(ctx, project))
        warn_store_fallback(snapshot.project)
        return snapshot
    raise AssertionError("unreachable")  # pragma: no cover - user_errors always raises


def warn_store_fallback(project: Any) -> None:
    """One located warning line when fim.yaml's `state:` is a `${VAR}` unset here, so this
    command uses the default local store instead (`fim.config.serving.store_fallback`):
    runs, usage and approvals read or written there are not the served ones. And one for
    each model setting left out because its `${VAR}` is unset where no model is called
    (`fim.config.serving.warned_here`)."""
    # deferred: loaded with the project by the caller anyway
    from fim.config.serving import warned_here

    for p in warned_here(project):
        hint = f" ({p.hint})" if p.hint else ""
        err(f"{p.path}:{p.line}:{p.column}: warning: {p.message}{hint}")


__all__ = [
    "ProjectOption",
    "err",
    "fail",
    "load_snapshot",
    "print_problems",
    "project_dir",
    "user_errors",
]
