"""Which fim.yaml settings only `fim serve` and `fim worker` read, and whether this process
needs them.

One fim.yaml serves development, CI and production: `state: "${FIM_STATE_URL}"` and
`server: {api_keys: ["${FIM_API_KEY}"]}` name secrets that exist only where fim serves. A
`${VAR}` there that is unset is an error where it is read (`fim serve`, `fim worker`: a
server on a local SQLite file or without its keys is worse than none) and a warning
everywhere else (`fim validate`, `fim eval`, `fim run` in a pull request's job or on a
laptop), as the loader already does for a connector's secret.

The default is "required": every caller that compiles a project (the server, its reloads,
the GitOps puller, a worker process uvicorn starts, a test) fails closed, and only the
CLI's other commands opt out (`fim.cli`). A context variable, not a global: the tests run
commands on threads of their own, and asyncio tasks and `to_thread` carry it along.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.schema import Project

SERVE_ONLY = ("state", "server")
"""fim.yaml's top-level keys that only `fim serve` and `fim worker` read (`state:` is also the
store of `fim run`/`fim eval`, which then use the default local one and say so)."""

SERVING_COMMANDS = frozenset({"serve", "worker", "mcp serve"})
"""The CLI commands (their path below `fim`) for which an unset `${VAR}` in a `SERVE_ONLY`
setting is an error: those that serve the project. `fim mcp serve` is a long-lived server of
its agents too: its runs, usage and spend belong in the shared store, not a local file
(attack-44 F6). `fim store migrate` reads `state:` only, and refuses an unset one itself
(`store_required`)."""


def serving_command(path: str) -> bool:
    """Whether the command at `path` (`"serve"`, `"mcp serve"`) needs `state:`/`server:`
    whole: it or a group above it is in `SERVING_COMMANDS`."""
    words = path.split()
    return any(" ".join(words[:n]) in SERVING_COMMANDS for n in range(1, len(words) + 1))


def serving_group(name: str) -> bool:
    """Whether some command below the group `name` is in `SERVING_COMMANDS`, so the group
    decides for its commands (the CLI's root only knows the first word)."""
    return any(command.startswith(f"{name} ") for command in SERVING_COMMANDS)


_REQUIRED: ContextVar[bool] = ContextVar("fim_serve_settings_required", default=True)


def serve_settings_required() -> bool:
    """Whether an unset `${VAR}` in `state:` or `server:` breaks the project here."""
    return _REQUIRED.get()


def require_serve_settings(required: bool) -> bool:
    """Set whether this command needs `state:`/`server:` whole; returns the previous value
    (the CLI puts it back when its command ends)."""
    previous = _REQUIRED.get()
    _REQUIRED.set(required)
    return previous


def unset_here(project: Project) -> list[Problem]:
    """The warnings of `project`'s `state:`/`server:` settings whose `${VAR}` is unset here
    (none where they are required: there they are problems)."""
    return [problem for _, problem in project._serve_only_unset]


def store_fallback(project: Project) -> Problem | None:
    """The warning that `state:` is an unset `${VAR}`, so this command uses the default local
    store instead: printed by every command that opens the store, never silent (a shell
    without FIM_STATE_URL read an empty `.fim/state.db` and said "no runs")."""
    return next(
        (problem for setting, problem in project._serve_only_unset if setting == "state"), None
    )


def store_required(project: Project, command: str) -> Problem | None:
    """The error of `command`, which acts on the store fim serves from (`fim store migrate
    [--check]`, the deploy step), when `state:` is an unset `${VAR}` here: on the default
    local file it would pass a migration Job or CI gate whose secret is missing
    (attack-44 F6). `server:` it never reads, so it may stay unset."""
    warning = store_fallback(project)
    if warning is None:
        return None
    cause = warning.message.split("; here `state` falls back", 1)[0]
    hint = f"export it or pass --state: {command} never acts on the local default store"
    return Problem(warning.path, warning.line, warning.column, cause, hint)


__all__ = [
    "SERVE_ONLY",
    "SERVING_COMMANDS",
    "require_serve_settings",
    "serve_settings_required",
    "serving_command",
    "serving_group",
    "store_fallback",
    "store_required",
    "unset_here",
]
