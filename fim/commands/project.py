"""Project commands: `fim init`, `fim validate`.

These only read the user's files, so they never import the model, MCP or database
libraries; `fim validate` is the merge gate of a GitOps repository and must start fast.
`fim list`, `fim show` and `fim schema` are in `fim.commands.declarations`.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fim.commands import ProjectOption, fail, project_dir, run_async, user_errors
from fim.errors import ConfigError, Problem
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
            help="Also start every MCP server and connect to every database; report "
            "failures (a read-only PostgreSQL connector whose role can write fails).",
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
    except ConfigError as exc:
        _report(exc.problems, format)
        raise typer.Exit(1) from None
    broken = [p for found in snapshot.broken_skills.values() for p in found]
    if broken:  # other agents still run, but the project is not valid
        _report(sorted(broken, key=lambda p: (p.path, p.line, p.column)), format)
        raise typer.Exit(1)
    if live and _live_failures(snapshot, format):
        raise typer.Exit(1)
    warnings = _unavailable_warnings(snapshot) + _sandbox_warnings(snapshot)
    warnings += _server_warnings(snapshot) + _confirm_warnings(snapshot)
    warnings += _mcp_command_warnings(snapshot)
    # a warning may quote a declaration's interpolated value (an MCP `command: ${VAR}`):
    # masked as every other exit masks it (attack-34: validate runs in CI on PR branches)
    warnings = [_masked(p, snapshot.mask) for p in warnings]
    if strict and warnings:
        _report(warnings, format)
        raise typer.Exit(1)
    # deferred: fim.config.loader is loaded by the compile above; named here for its warnings
    from fim.config.claude_files import claude_code_files

    # Claude Code's files fim does not read: warned at each, never failed on (--strict), as a
    # repository developed with Claude Code keeps its .claude/ for Claude Code itself
    strays = [
        _masked(p, snapshot.mask)
        for p in claude_code_files(snapshot.root, snapshot.project, snapshot.agents)
    ]
    _warn(warnings + strays, format)
    if format is Format.json:
        sys.stdout.write("[]\n")
        return
    sys.stdout.write(f"ok: {summary(snapshot)} (snapshot {snapshot.version})\n")
    _editor_note(snapshot.root)


def _masked(problem: Problem, mask: Callable[[str], str]) -> Problem:
    hint = mask(problem.hint) if problem.hint else problem.hint
    return dataclasses.replace(problem, message=mask(problem.message), hint=hint)


def _editor_note(root: Path) -> None:
    """A fresh clone has the committed `.vscode/settings.json` that `fim init` wrote but not
    the schemas it points at (`.fim/` is not in git): every YAML file shows "Unable to load
    schema" in the editor. A note, not a warning: `--strict` in CI must not fail on it."""
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


def _unavailable_warnings(snapshot: Snapshot) -> list[Problem]:
    """Connectors and MCP servers whose `${VAR}` is unset here: a warning, since the secret
    is often exported only where fim serves (and CI replays need none); the agents and
    workflows that use one fail when they start."""
    problems = []
    for what, found in (
        ("connector", snapshot.unavailable_connectors),
        ("MCP server", snapshot.unavailable_mcp),
    ):
        for name, p in ((name, p) for name, unset in found.items() for p in unset):
            message = f"{what} '{name}' is unavailable: {p.message}"
            problems.append(Problem(p.path, p.line, p.column, message, p.hint))
    return sorted(problems, key=lambda p: (p.path, p.line, p.column))


def _mcp_command_warnings(snapshot: Snapshot) -> list[Problem]:
    """Stdio MCP servers whose `command` is not installed here (`pythn`): the check every
    run of an agent that uses one makes first (`fim.run.preflight.command_problem`), at the
    `command:` line. A warning, as an unset variable is: the machine that validates is
    often not the one that serves; `--strict` fails on it. No process is started."""
    if not snapshot.project.mcp_servers:
        return []
    # deferred: only a project with MCP servers needs the run-time checks
    from fim.run.preflight import command_hint, command_problem

    problems = []
    for name in snapshot.project.mcp_servers:
        if (problem := command_problem(snapshot, name)) is not None:
            path = ("mcp_servers", name, "command")
            problems.append(_at_project(snapshot, path, problem, command_hint(snapshot, name)))
    return problems


def _sandbox_warnings(snapshot: Snapshot) -> list[Problem]:
    """Agents whose python_exec or shell would refuse to run here (no bubblewrap): a warning,
    not an error, since the machine that validates is often not the one that serves."""
    problems = []
    for name, agent in snapshot.agents.items():
        listed = [t for t in agent.tools if t in ("python_exec", "shell")]
        if "compute" in agent.tool_categories and "python_exec" not in listed:
            listed.append("python_exec")
        if not listed:
            continue
        from fim.tools.sandbox import warnings_for  # only when an agent needs the sandbox

        source = snapshot.source("agent", name)
        problems += [
            Problem(source.path, source.line, source.column, message)
            for message in warnings_for(listed)
        ]
    return problems


def _confirm_warnings(snapshot: Snapshot) -> list[Problem]:
    """`confirm` hooks that can ask about no call of their agent: they look like protection
    and never fire (`fim.hooks.builtin.confirm.asks_about_nothing`)."""
    problems = []
    confirms = any(decl.use == "confirm" for decl in snapshot.hooks.values())
    for name, agent in snapshot.agents.items():
        if not any(spec.use == "confirm" or (confirms and spec.ref) for spec in agent.hooks):
            continue  # most agents: no confirm, nothing to load
        # deferred: only for agents with a confirm hook; loads the hooks and the tools
        from fim.hooks.build import resolve
        from fim.hooks.builtin.confirm import asks_about_nothing

        for spec in agent.hooks:
            try:
                hook = resolve(spec, snapshot)
            except Exception:  # a broken ref is reported as an error by the compile
                continue
            if hook.use != "confirm":
                continue
            found = asks_about_nothing(snapshot, agent, hook.with_, hook.matcher)
            if found is not None:
                source = snapshot.source("agent", name)
                problems.append(Problem(source.path, source.line, source.column, *found))
    return problems


def _server_warnings(snapshot: Snapshot) -> list[Problem]:
    """Settings that open a server more than their owner may think."""
    server = snapshot.project.server
    keys = [key if isinstance(key, str) else key.key for key in server.api_keys]
    keyed = any(keys) or any(server.operator_keys)  # an unset ${VAR} is no key
    found: list[Problem] = []
    if "*" in server.cors_origins and not keyed:
        message = (
            "server.cors_origins lists '*' and the server has no API keys: a page of any web "
            "site its users open can run its agents and decide its approvals"
        )
        found.append(Problem("fim.yaml", 1, 1, message))
    if "*" in server.allowed_hosts and not keyed:
        found.append(
            _at_project(
                snapshot,
                ("server", "allowed_hosts"),
                "server.allowed_hosts lists '*' and the server has no API keys: a web site "
                "that re-points its name at the server (DNS rebinding) can use it",
                "list the names your proxy forwards instead",
            )
        )
    elif server.allow_open and not server.allowed_hosts and not keyed:
        found.append(
            _at_project(
                snapshot,
                ("server", "allow_open"),
                "server.allow_open without server.allowed_hosts: a request whose Host is not "
                "a loopback name is refused (403), the name your proxy forwards too",
                "list the names your proxy forwards in server.allowed_hosts",
            )
        )
    if server.key_budget is not None and not keyed:
        found.append(
            _at_project(
                snapshot,
                ("server", "key_budget"),
                "server.key_budget has no effect: the server has no server.api_keys or "
                "server.operator_keys, and it limits what each key spends",
                "add api_keys, or use `budget:` in fim.yaml to limit every run",
            )
        )
    return found


def _at_project(snapshot: Snapshot, path: tuple[str, ...], message: str, hint: str) -> Problem:
    """A warning at the value at `path` in fim.yaml (line 1 when it cannot be read)."""
    # deferred: only for a warning, which reads fim.yaml's text again for its position
    from fim.config.yamlio import parse

    try:
        doc = parse((snapshot.root / "fim.yaml").read_text(encoding="utf-8"), "fim.yaml")
    except Exception:  # the snapshot compiled from it: unreadable now is a race, not a problem
        return Problem("fim.yaml", 1, 1, message, hint)
    return doc.problem(path, message, hint, key=True)


def _warn(problems: list[Problem], format: Format) -> None:
    """Warnings go to stderr (stdout stays the list of errors) and never fail validate."""
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
    if problems:
        _report(problems, format)
    return bool(problems)


def _report(problems: list[Problem], format: Format) -> None:
    out = sys.stdout
    if format is Format.json:
        out.write(json.dumps([p.as_dict() for p in problems], indent=2) + "\n")
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
    from fim.scaffold import scaffold

    target = directory.expanduser().resolve()
    if (target / "fim.yaml").exists():
        fail(f"{directory} already holds a fim project (fim.yaml exists)")
    try:
        written = scaffold(target, name or target.name)
    except FileExistsError as exc:
        fail(f"refusing to overwrite {exc.filename}", "use an empty or new directory")
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.compile import compile_project

    with user_errors():
        snapshot = compile_project(target)
    sys.stdout.write(f"created {len(written)} files in {directory}: {summary(snapshot)}\n")
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
