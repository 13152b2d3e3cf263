"""Which fim.yaml settings only some commands read, and whether this process needs them.

One project serves development, CI and production: `state: "${FIM_STATE_URL}"` and
`server: {api_keys: ["${FIM_API_KEY}"]}` name secrets that exist only where fim serves, and
`models: {general: {api_base: "${LLM_BASE}", api_key: "${LLM_KEY}"}}` (or an agent's, a
workflow node's, an eval judge's own `model:` settings) secrets that exist only where fim
calls a model. A `${VAR}` of such a group ("serve", "models") that is unset is an error
where the group is needed (`fim serve` and `fim worker` need both: a server on a local
SQLite file, without its keys or on a provider's default endpoint is worse than none;
`fim run`, `fim eval` need "models") and a located warning everywhere else (`fim validate`
and `--strict` in a pull request's job without secrets, `fim runs`, `fim usage` on a
laptop), as the loader already does for a connector's secret. There the setting is left
out, as if unwritten. A model's `model:` string itself stays required everywhere:
`fim validate` checks its provider, and it is no secret.

The default is "every group needed": every caller that compiles a project (the server, its
reloads, the GitOps puller, a worker process uvicorn starts, a test) fails closed, and only
the CLI's commands say which groups they need (`fim.cli`; a command that calls a model only
for some options, `fim show --prompt --request`, adds "models" itself). A context variable,
not a global: the tests run commands on threads of their own, and asyncio tasks and
`to_thread` carry it along.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING

from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.schema import Project
    from fim.config.yamlio import Path_

SERVE = "serve"
MODELS = "models"
GROUPS = frozenset({SERVE, MODELS})
"""The setting groups a command may need whole: `state:`/`server:`, and models' settings."""

SERVE_ONLY = ("state", "server")
"""fim.yaml's top-level keys that only `fim serve` and `fim worker` read (`state:` is also the
store of `fim run`/`fim eval`, which then use the default local one and say so)."""

SERVING_COMMANDS = frozenset({"serve", "worker", "mcp serve"})
"""The CLI commands (their path below `fim`) for which an unset `${VAR}` in a `SERVE_ONLY`
setting is an error: those that serve the project. `fim mcp serve` is a long-lived server of
its agents too: its runs, usage and spend belong in the shared store, not a local file
(attack-44 F6). `fim store migrate` reads `state:` only, and refuses an unset one itself
(`store_required`)."""

MODEL_COMMANDS = (
    "run",
    "eval",
    "workflow run",
    "workflow resume",
    "serve",
    "worker",
    "mcp serve",
    "runs rerun",
)
"""The CLI commands that call models, for which an unset `${VAR}` in a model's settings is
an error. `fim eval` replaying cassettes too: it checks each recorded endpoint against the
configured `api_base`. `fim show --prompt --request` calls the fast model once and says so
itself. In the order the messages name them."""


def command_needs(path: str) -> frozenset[str]:
    """The groups the command at `path` (`"serve"`, `"mcp serve"`) needs whole: those whose
    list names it or a group above it."""
    words = path.split()
    paths = {" ".join(words[:n]) for n in range(1, len(words) + 1)}
    needs = {SERVE} if paths & SERVING_COMMANDS else set()
    return frozenset(needs | ({MODELS} if paths & set(MODEL_COMMANDS) else set()))


def group_decides(name: str) -> bool:
    """Whether some command below the group `name` is listed, so the group decides for its
    commands (the CLI's root only knows the first word)."""
    return any(c.startswith(f"{name} ") for c in (*SERVING_COMMANDS, *MODEL_COMMANDS))


_NEEDED: ContextVar[frozenset[str]] = ContextVar("fim_settings_needed", default=GROUPS)


def settings_needed() -> frozenset[str]:
    """The groups whose unset `${VAR}` breaks the project here."""
    return _NEEDED.get()


def need_settings(groups: Iterable[str]) -> frozenset[str]:
    """Set the groups this command needs whole; returns the previous ones (the CLI puts them
    back when its command ends)."""
    previous = _NEEDED.get()
    _NEEDED.set(frozenset(groups))
    return previous


def setting_group(kind: str, path: Path_) -> str | None:
    """The group of the value at `path` in a file of `kind` (`"project"` for fim.yaml), or
    None: `state:`/`server:` ("serve"), or a key of a model's settings other than its `model:`
    string ("models"): fim.yaml's `models.<role>.<key>`, an agent's `model.<key>`, a workflow
    node's `nodes.<id>.model.<key>`, an eval judge's `judge.model.<key>`."""
    if kind == "project" and path and path[0] in SERVE_ONLY:
        return SERVE
    at = model_at(kind, path)
    return MODELS if at is not None and len(path) > at + 1 and path[at + 1] != "model" else None


def model_at(kind: str, path: Path_) -> int | None:
    """The index in `path` of the step that names a model (`general` of `models.general`,
    the `model` key elsewhere), or None when `path` is not inside one."""
    if kind == "project":
        return 1 if len(path) > 1 and path[0] == "models" else None
    if kind == "agent":
        return 0 if path[:1] == ("model",) else None
    if kind == "workflow":
        return 2 if path[:1] == ("nodes",) and path[2:3] == ("model",) else None
    if kind == "eval":
        return next(
            (i + 1 for i in range(len(path) - 1) if path[i : i + 2] == ("judge", "model")), None
        )
    return None


def model_commands() -> str:
    """The commands that call models, as the messages name them."""
    first, *rest = MODEL_COMMANDS
    names = [f"`fim {first}`", *(f"`{c}`" for c in rest)]
    return ", ".join(names[:-1]) + f" and {names[-1]}"


def model_error(setting: str, problem: Problem) -> Problem:
    """The error of a model's setting unset where models are called: which commands read it."""
    hint = f"{model_commands()} call models with `{setting}`: export the variable where they run"
    return Problem(problem.path, problem.line, problem.column, problem.message, hint)


def model_warning(setting: str, problem: Problem) -> Problem:
    """The warning of a model's setting unset here, where no model is called: the setting is
    left out, and the commands that call models refuse to start without it."""
    message = f"{problem.message}; only the commands that call models read `{setting}`"
    hint = f"{model_commands()} refuse to start without it: export it where they run"
    return Problem(problem.path, problem.line, problem.column, message, hint)


def unset_here(project: Project) -> list[Problem]:
    """The warnings of `project`'s settings whose `${VAR}` is unset here, `state:`/`server:`
    and models' (none where they are needed: there they are problems)."""
    return [problem for _, problem in project._serve_only_unset]


def warned_here(project: Project) -> list[Problem]:
    """What every command that loads the project says about its unset settings: that
    `state:` falls back to the local store (`store_fallback`), and each model setting left
    out (a `fim show model` without its `api_base` would otherwise look complete)."""
    fallback = store_fallback(project)
    models = [p for setting, p in project._serve_only_unset if setting_is_model(setting)]
    return ([fallback] if fallback is not None else []) + models


def setting_is_model(setting: str) -> bool:
    """Whether a setting `unset_here` names is a model's (its group: not `state`/`server`)."""
    return setting.split(".", 1)[0] not in SERVE_ONLY


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
    "GROUPS",
    "MODELS",
    "MODEL_COMMANDS",
    "SERVE",
    "SERVE_ONLY",
    "SERVING_COMMANDS",
    "command_needs",
    "group_decides",
    "model_at",
    "model_error",
    "model_warning",
    "need_settings",
    "setting_group",
    "settings_needed",
    "store_fallback",
    "store_required",
    "unset_here",
    "warned_here",
]
