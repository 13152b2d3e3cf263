"""The `fim` command line: a thin typer app that parses, calls the library and prints.

Each area contributes its commands from `fim/commands/<area>.py` through
`register(app)`; heavy libraries are imported inside command functions so `fim --help`
and `fim validate` start fast. User mistakes end as one line per problem and exit code 1,
never a traceback.

`fim validate` is a CI merge gate, so its start-up must not depend on what the other
command modules import: for the project commands (`init`, `validate`, `list`, `show`,
`schema`) `main()` builds an app with only the module of that command
(`fim.commands.project` or `fim.commands.declarations`). `fim.cli.app` (what tests and
`fim --help` use) has every command.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

# Importing typer (and its click) builds thousands of objects and frees no cycles: the
# cyclic collector's passes over them are paused for the import (see `_one_shot`).
_gc_was_enabled = gc.isenabled()
gc.disable()
try:
    import typer
    from typer.core import TyperGroup

    from fim.commands import ProjectOption, err
    from fim.config.serving import command_needs, group_decides, need_settings
    from fim.environ import hide_from_children
    from fim.errors import ConfigError, ProjectNotFound, RunError
    from fim.stdout_guard import guarded
finally:
    if _gc_was_enabled:
        gc.enable()

COMMAND_MODULES: list[str] = [
    "fim.commands.project",
    "fim.commands.declarations",
    "fim.commands.run",
    "fim.commands.serve",
    "fim.commands.eval",
    "fim.commands.workflow",
    "fim.commands.approvals",
    "fim.commands.mcp",
    "fim.commands.connector",
    "fim.commands.usage",
    "fim.commands.sessions",
    "fim.commands.runs",
    "fim.commands.prune",
    "fim.commands.worker",
    "fim.commands.store",
]
"""Modules whose `register(app)` adds commands, in help order."""

PROJECT_COMMANDS: dict[str, str] = {
    "init": "fim.commands.project",
    "validate": "fim.commands.project",
    "list": "fim.commands.declarations",
    "show": "fim.commands.declarations",
    "schema": "fim.commands.declarations",
}
"""The project commands and the module of each, which never needs the other modules."""


def version() -> str:
    """The installed distribution's version (pyproject.toml), read without importing fim's
    heavier modules."""
    # deferred: loading csv costs a few ms
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("fim")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


ROUTES: dict[str, str] = {
    "chat": "to chat with an agent: fim run AGENT, without a prompt",
    "dev": "the dev page and the HTTP API: fim serve, then open http://127.0.0.1:8000/",
    "web": "the dev page and the HTTP API: fim serve, then open http://127.0.0.1:8000/",
    "ui": "the dev page and the HTTP API: fim serve, then open http://127.0.0.1:8000/",
    "agents": "the project's agents: fim list agents",
    "trace": "a run's steps: fim runs show ID (or last); fim runs list lists the runs",
    "logs": "a run's steps: fim runs show ID (or last); fim runs list lists the runs",
}
"""Commands other agent tools have (`adk web`, `langgraph dev`, `claude` chats) -> where fim
does it: said instead of click's did-you-mean (`fim chat` was "Did you mean 'schema'?")."""

OPTION_ROUTES: dict[tuple[str, str], str] = {
    ("run", option): "use --session NAME: fim run AGENT --session NAME continues that "
    "conversation; fim sessions list shows them"
    for option in ("--resume", "--continue", "--thread", "--thread-id", "-c", "-r")
}
"""(command, option) other tools take -> what fim takes instead (`claude --resume`,
LangGraph's `thread_id`)."""


class _Routed(TyperGroup):
    """fim's top-level group: an unknown command or option that another agent tool has
    (`ROUTES`, `OPTION_ROUTES`) is told where fim does it."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and args[0] in ROUTES:
            ctx.fail(f"No such command '{args[0]}' ({ROUTES[args[0]]})")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:  # click's NoSuchOption, of the click typer carries
            where, option = getattr(exc, "ctx", None), getattr(exc, "option_name", None)
            command = getattr(getattr(where, "command", None), "name", None)
            route = OPTION_ROUTES.get((str(command), str(option)))
            if where is None or route is None:
                raise
            where.fail(f"No such option: {option} ({route})")
            raise  # pragma: no cover - fail() raises


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"fim {version()}\n")
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    project: ProjectOption = None,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Print fim's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Run LLM agents declared in version-controlled YAML."""
    ctx.obj = {"project": project}
    # An unset `${VAR}` in `state:`/`server:` or a model's settings fails only the commands
    # that read them; the others warn (`fim.config.serving`). Put back when the command ends
    # (in-process tests).
    was = need_settings(command_needs(ctx.invoked_subcommand or ""))
    ctx.call_on_close(lambda: need_settings(was))


def _group_root(name: str) -> Callable[[typer.Context], None]:
    """The callback of the command group `name`: it knows which of its commands runs (`fim
    mcp serve`, `fim workflow run`), which `_root` does not; each puts back what it found."""

    def decide(ctx: typer.Context) -> None:
        was = need_settings(command_needs(f"{name} {ctx.invoked_subcommand}"))
        ctx.call_on_close(lambda: need_settings(was))  # the group invoked on its own too

    decide.fim_group_root = True  # type: ignore[attr-defined]
    return decide


def _hide_flag_types() -> None:
    """Show no type for on/off flags in `--help`.

    typer's rich help prints a type column for every option, `<bool>` for a flag too, which
    reads as if the flag took a value: `fim run demo --verbose true` then runs the prompt
    "true". A flag's metavar stays whatever the option sets explicitly."""
    # deferred: typer.core is loaded by `import typer`; this only reaches into it
    from typer.core import TyperOption

    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "fim_hides_flags", False):
        return  # another typer, or already done by an earlier build_app

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag and self.metavar is None:
            return None
        result: str | None = original(self, ctx)
        return result

    display_type_rich.fim_hides_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


def build_app(modules: list[str] | None = None) -> typer.Typer:
    """A typer app with the commands of `modules` (default: all of COMMAND_MODULES)."""
    _hide_flag_types()
    app = typer.Typer(
        name="fim",
        cls=_Routed,
        help="Run LLM agents declared in version-controlled YAML.",
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for name in COMMAND_MODULES if modules is None else modules:
        module = importlib.import_module(name)  # an import error is raised, never skipped
        register = getattr(module, "register", None)
        if not callable(register):
            raise TypeError(f"command module {name} has no register(app) function")
        register(app)
    for group in app.registered_groups:  # `fim mcp serve` needs state:/server: whole
        sub = group.typer_instance
        if group.name and sub is not None and group_decides(group.name):
            had = sub.registered_callback
            if had is not None and getattr(had.callback, "fim_group_root", False):
                continue  # a module-level group (`fim workflow`) an earlier build_app set up
            if had is not None:
                raise TypeError(f"command group {group.name} has a callback: decide there")
            sub.callback()(_group_root(group.name))
    return app


def __getattr__(name: str) -> Any:
    """`fim.cli.app` is built on first access, so `main()` can skip unneeded modules."""
    if name == "app":
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(f"module 'fim.cli' has no attribute {name!r}")


def _command(argv: list[str]) -> str | None:
    """The subcommand in `argv`, skipping global options (and the value of --project)."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--project", "-p"):
            skip = True
        elif not token.startswith("-"):
            return token
    return None


@contextmanager
def _one_shot() -> Iterator[None]:
    """How the project commands run: short-lived processes that only read the user's files.

    - The cyclic garbage collector is paused: start-up builds thousands of objects (module
      and pydantic schema tables) and frees no cycles; its ~60 passes over that growing heap
      were ~8 ms of a 200 ms `fim validate` (the compiler pauses it for the same reason).
      At the end everything is frozen (`gc.freeze`), so the interpreter's collections at
      exit do not walk that heap again either.
    - pydantic plugins are not loaded (unless PYDANTIC_DISABLE_PLUGINS says otherwise):
      finding them reads the metadata of every installed distribution (~6 ms, growing with
      the environment) for plugins that would only observe the declaration models.
    """
    was_enabled = gc.isenabled()
    set_plugins = "PYDANTIC_DISABLE_PLUGINS" not in os.environ
    gc.disable()
    if set_plugins:
        os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    try:
        yield
    finally:
        if set_plugins:
            os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)
        gc.freeze()
        if was_enabled:
            gc.enable()


def main() -> None:
    """Console entry point: user mistakes that escape a command still get one line each."""
    hide_from_children()  # before any child starts: its /proc/<ppid>/environ is empty
    command = _command(sys.argv[1:])
    module = PROJECT_COMMANDS.get(command) if command is not None else None
    with guarded(command):  # what the project's Python prints never reaches our stdout
        if module is not None:
            with _one_shot():
                _run(build_app([module]))
        else:
            _run(build_app())


def _run(app: typer.Typer) -> None:
    try:
        app()
    except ProjectNotFound as exc:  # about no file: there is none
        err(f"error: {exc}")
        sys.exit(1)
    except ConfigError as exc:
        for problem in exc.problems:
            err(str(problem))
        sys.exit(1)
    except RunError as exc:
        err(f"error: {exc}")
        sys.exit(1)
    except KeyboardInterrupt:
        err("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
