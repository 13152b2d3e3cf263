"""The `fim` command line: a thin typer app that parses, calls the library and prints.

Each area contributes its commands from `fim/commands/<area>.py` through
`register(app)`; heavy libraries are imported inside command functions so `fim --help`
and `fim validate` start fast. User mistakes end as one line per problem and exit code 1,
never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from fim.commands import ProjectOption, err
from fim.errors import ConfigError, RunError

COMMAND_MODULES: list[str] = [
    "fim.commands.project",
    "fim.commands.run",
    "fim.commands.serve",
    "fim.commands.eval",
    "fim.commands.workflow",
    "fim.commands.approvals",
    "fim.commands.mcp",
    "fim.commands.connector",
]
"""Modules whose `register(app)` adds commands, in help order."""

app = typer.Typer(
    name="fim",
    help="Run LLM agents declared in version-controlled YAML.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(ctx: typer.Context, project: ProjectOption = None) -> None:
    """Run LLM agents declared in version-controlled YAML."""
    ctx.obj = {"project": project}


def _register_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_commands()


def main() -> None:
    """Console entry point: user mistakes that escape a command still get one line each."""
    try:
        app()
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
