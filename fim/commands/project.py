"""Project commands: `fim init`, `fim validate`.

These only read the user's files, so they never import the model, MCP or database
libraries; `fim validate` is the merge gate of a GitOps repository and must start fast.
`fim list`, `fim show` and `fim schema` are in `fim.commands.declarations`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fim.commands import ProjectOption, fail, project_dir, run_async, user_errors
from fim.commands.project_warnings import warnings_of
from fim.errors import ConfigError, Problem, ProjectNotFound
from fim.terminal import printable

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot


class Format(StrEnum):
    text = "text"
    github = "github"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("validate")(validate)


# ---------------------------------------------------------------------------- validate


def validate(
    ctx: typer.Context,
    project: ProjectOption = None,
    format: Annotated[
        Format, typer.Option("--format", "-f", help="text, github (Actions annotations), json")
    ] = Format.text,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Also start every MCP server and connect to every database and the state "
            "store; report failures (a read-only PostgreSQL connector whose role can write "
            "fails, a state store whose role may not use fim's tables).",
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Fail on warnings too (a connector or MCP server unavailable because a "
            "${VAR} is unset or its command is not installed, a missing sandbox, an open "
            "CORS setting).",
        ),
    ] = False,
) -> None:
    """Check every file of the project; exit 1 with one line per problem.

    Warnings go to stderr and do not fail the check unless --strict."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.compile import compile_project

    try:
        snapshot = compile_project(project_dir(ctx, project))
    except ProjectNotFound as exc:  # no file to point at: one `error:` line, as `fim run`'s
        if format is Format.github:
            sys.stdout.write(f"::error::{_gh_escape(printable(str(exc)))}\n")
        fail(exc.message, exc.hint)
    except ConfigError as exc:
        if format is not Format.json:  # json's stdout is one list: the errors
            _warn(_warnings_of_broken(exc.snapshot), format)
        _report(exc.problems, format)
        raise typer.Exit(1) from None
    broken = [p for found in snapshot.broken_skills.values() for p in found]
    if broken:  # other agents still run, but the project is not valid
        _report(sorted(broken, key=lambda p: (p.path, p.line, p.column)), format)
        raise typer.Exit(1)
    if live and _live_failures(snapshot, format):
        raise typer.Exit(1)
    warnings = warnings_of(snapshot)
    # a warning may quote a declaration's interpolated value (an MCP `command: ${VAR}`):
    # masked as every other exit masks it (attack-34: validate runs in CI on PR branches)
    warnings = [_masked(p, snapshot.mask) for p in warnings]
    if strict and warnings:
        _report(warnings, format, severity="warning")
        raise typer.Exit(1)
    # deferred: fim.config.loader is loaded by the compile above; named here for its warnings
    from fim.config.claude_files import claude_code_files
    from fim.config.serving import unset_here

    # `state:`/`server:` secrets unset here: warned, never failed on (--strict), as they
    # exist only where `fim serve`/`fim worker` run, and those refuse to start without them
    strays = [*unset_here(snapshot.project)]

    # Claude Code's files fim does not read: warned at each, never failed on (--strict), as a
    # repository developed with Claude Code keeps its .claude/ for Claude Code itself
    strays += [
        _masked(p, snapshot.mask)
        for p in claude_code_files(snapshot.root, snapshot.project, snapshot.agents)
    ]
    _warn(warnings + strays, format)
    if format is Format.json:  # the warnings too, as `--format github` annotates them
        sys.stdout.write(_as_json(warnings + strays, "warning"))
        return
    sys.stdout.write(f"ok: {summary(snapshot)} (snapshot {snapshot.version})\n")
    _editor_note(snapshot.root)


def _warnings_of_broken(snapshot: Snapshot | None) -> list[Problem]:
    """The warnings of a project that has errors, masked: a connector unavailable for an
    unset `${VAR}` may be what the errors are about, so they are never hidden by them
    (newcomer-52 #1). None when the compile built no snapshot or it cannot be warned about."""
    if snapshot is None:
        return []
    # deferred: fim.config.loader is loaded by the compile; named here for its warnings
    from fim.config.serving import unset_here

    try:
        found = [*warnings_of(snapshot), *unset_here(snapshot.project)]
        return [_masked(p, snapshot.mask) for p in found]
    except Exception:  # a check of a project that failed its checks: the errors say why
        return []


def _masked(problem: Problem, mask: Callable[[str], str]) -> Problem:
    """A warning as every exit shows it: the file name masked too, as the message that
    quotes it is (a secret written in a file name showed in the location, attack-42 F4)."""
    hint = mask(problem.hint) if problem.hint else problem.hint
    path = mask(problem.path)
    return dataclasses.replace(problem, path=path, message=mask(problem.message), hint=hint)


def _editor_note(root: Path) -> None:
    """A fresh clone has the committed `.vscode/settings.json` that `fim init` wrote but not
    the schemas it points at (`.fim/` is not in git): every YAML file shows "Unable to load
    schema" in the editor. A note, not a warning: `--strict` in CI must not fail on it; and
    none in CI (`CI` or `GITHUB_ACTIONS` set), where no editor reads it and every clean
    checkout would print it (newcomer7 #7)."""
    if os.environ.get("CI") or os.environ.get("GITHUB_ACTIONS"):
        return
    settings = root / ".vscode" / "settings.json"
    try:
        points = ".fim/schema/" in settings.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    if points and not (root / ".fim" / "schema" / "agent.schema.json").is_file():
        sys.stderr.write(
            "note: .vscode/settings.json points at .fim/schema/, which is missing here "
            "(.fim/ is not in git): `fim schema --write .fim/schema` writes it\n"
        )


def _warn(problems: list[Problem], format: Format) -> None:
    """Warnings go to stderr (stdout stays the list of errors, or `--format json`'s list)
    and never fail validate."""
    for p in problems:
        if format is Format.github:
            file = _gh_escape(p.path, prop=True)
            message = _gh_escape(printable(p.message))
            sys.stderr.write(f"::warning file={file},line={p.line},col={p.column}::{message}\n")
        else:
            hint = f" ({p.hint})" if p.hint else ""
            line = f"{p.path}:{p.line}:{p.column}: warning: {p.message}{hint}"
            sys.stderr.write(printable(line) + "\n")


def _live_failures(snapshot: Snapshot, format: Format) -> bool:
    """Connect to each declared MCP server and database; report the ones that fail (with
    the server's stderr, or why a read-only database's role is refused)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.connectors.database import check_live as check_databases
    from fim.mcp.manager import check_live

    results = run_async(check_live(snapshot))
    problems = [
        Problem("fim.yaml", 1, 1, f"MCP server '{name}' failed: {detail}")
        for name, ok, detail in results
        if not ok
    ]
    for name, ok, detail in run_async(check_databases(snapshot)):
        if not ok:
            src = snapshot.source("connector", name)
            problems.append(
                Problem(src.path, src.line, src.column, f"database '{name}' failed: {detail}")
            )
    problems += _store_problems(snapshot)
    if problems:  # an MCP server's stderr, a driver's error: they may quote a secret
        _report([_masked(p, snapshot.mask) for p in problems], format)
    return bool(problems)


def _store_problems(snapshot: Snapshot) -> list[Problem]:
    """The state store as `fim serve` would open it, read only: reachable, its tables
    usable by the role, or creatable (`fim.store.health.live_problem`)."""
    # deferred: loading fim.store costs a few ms
    from fim.store.engine import Database
    from fim.store.health import live_problem

    if not snapshot.project.state:  # a `${VAR}` unset here: warned above, checked where set
        return []
    db = Database(snapshot.project.state, snapshot.root)
    found = live_problem(db)
    return [] if found is None else [Problem("fim.yaml", 1, 1, found[0], hint=found[1])]


def _as_json(problems: list[Problem], severity: str) -> str:
    """`--format json`'s list: each problem with its `severity`, `error` or `warning`."""
    return json.dumps([{**p.as_dict(), "severity": severity} for p in problems], indent=2) + "\n"


def _report(problems: list[Problem], format: Format, severity: str = "error") -> None:
    """Problems that fail the check, on stdout. `severity` is what `--format json` says they
    are: warnings under `--strict` fail the check and are still warnings."""
    out = sys.stdout
    if format is Format.json:
        out.write(_as_json(problems, severity))
        return
    for p in problems:
        if format is Format.github:
            message = _gh_escape(printable(p.message + (f" ({p.hint})" if p.hint else "")))
            file = _gh_escape(p.path, prop=True)
            out.write(f"::error file={file},line={p.line},col={p.column}::{message}\n")
        else:  # a message quotes the project's text: shown, never a terminal command
            out.write(printable(f"{p}") + "\n")
    files = len({p.path for p in problems})
    n = len(problems)
    out.write(f"{n} problem{'s' if n != 1 else ''} in {files} file{'s' if files != 1 else ''}\n")


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary(snapshot: Snapshot) -> str:
    """`3 agents, 2 connectors, 2 skills, 1 workflow, 1 hook, 1 eval suite`."""
    counts = [
        (len(snapshot.connectors), "connector"),
        (len(snapshot.skills), "skill"),
        (len(snapshot.workflows), "workflow"),
        (len(snapshot.hooks), "hook"),
        (len(snapshot.evals), "eval suite"),
    ]
    parts = [_count(len(snapshot.agents), "agent")]
    parts += [_count(n, word) for n, word in counts if n]
    unavailable = len(snapshot.unavailable_connectors) + len(snapshot.unavailable_mcp)
    if unavailable:  # left out of the counts: they cannot run here
        parts.append(f"{unavailable} unavailable")
    return ", ".join(parts)


# ---------------------------------------------------------------------------- init


def init(
    directory: Annotated[
        Path, typer.Argument(help="Directory of the new project (default: this one)")
    ] = Path("."),
    name: Annotated[str | None, typer.Option(help="Project name (default: dir name)")] = None,
) -> None:
    """Create a new project (agent, skill, connector, workflow, eval) that validates."""
    # deferred: loading fim.scaffold costs tens of ms
    from fim.config.files import LinkRefused
    from fim.scaffold import scaffold

    target = directory.expanduser().resolve()
    if (target / "fim.yaml").exists():
        fail(f"{directory} already holds a fim project (fim.yaml exists)")
    try:
        written = scaffold(target, name or target.name)
    except FileExistsError as exc:
        fail(
            f"refusing to overwrite {exc.filename}",
            "use an empty or new directory; only an existing .gitignore is added to",
        )
    except LinkRefused as exc:
        fail(exc.strerror or str(exc), "remove the link, or use an empty or new directory")
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.compile import compile_project

    with user_errors():
        snapshot = compile_project(target)
    sys.stdout.write(f"created {len(written.created)} files in {directory}: {summary(snapshot)}\n")
    for path, lines in written.added.items():  # an existing repository's own file
        sys.stdout.write(f"added {', '.join(lines)} to your {path.name} (its lines are kept)\n")
    # deferred: the editor set-up exports the schemas, which only init needs
    from fim.scaffold.editor import SCHEMA_DIR, schema_setting, vscode_settings, write_schemas

    try:  # a convenience: an unwritable .vscode must not fail a project that was made
        schemas = write_schemas(target)
        said, ok = vscode_settings(target)
    except OSError as exc:
        schemas, said, ok = [], f"editor set-up skipped: {exc.strerror or exc}", False
    if schemas:
        again = f"fim schema --write {SCHEMA_DIR}"
        sys.stdout.write(f"editor: {len(schemas)} JSON Schemas in {SCHEMA_DIR}/ ({again} in ")
        sys.stdout.write(f"a fresh clone or after upgrading fim); {said}\n")
    if not ok:
        setting = json.dumps({"yaml.schemas": schema_setting()}, indent=2)
        said = "" if schemas else f"{said}\n"
        sys.stdout.write(f"{said}for VS Code, add to .vscode/settings.json:\n{setting}\n")
    here = target == Path.cwd().resolve()
    # quoted: `fim init "my agents"` must print a line that pastes into a shell as it is
    cd = "" if here else f"cd {shlex.quote(str(directory))} && "
    sys.stdout.write(f"next: {cd}fim validate && fim list\n")
