"""Project commands: `fim init`, `fim validate`, `fim list`, `fim show`, `fim schema`.

These only read the user's files, so they never import the model, MCP or database
libraries; `fim validate` is the merge gate of a GitOps repository and must start fast.
"""

from __future__ import annotations

import io
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import ProjectOption, fail, load_snapshot, project_dir, run_async, user_errors
from fim.errors import ConfigError, Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot

KIND_ATTRS = {
    "agent": "agents",
    "connector": "connectors",
    "skill": "skills",
    "workflow": "workflows",
    "hook": "hooks",
    "eval": "evals",
    "model": "models",
}
_PLURAL = {f"{k}s": k for k in KIND_ATTRS} | {"evals": "eval", "suites": "eval"}


class Format(StrEnum):
    text = "text"
    github = "github"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("validate")(validate)
    app.command("list")(list_)
    app.command("show")(show)
    app.command("schema")(schema)


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
) -> None:
    """Check every file of the project; exit 1 with one line per problem."""
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
    _warn(_sandbox_warnings(snapshot), format)
    if format is Format.json:
        sys.stdout.write("[]\n")
        return
    sys.stdout.write(f"ok: {summary(snapshot)} (snapshot {snapshot.version})\n")


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


def _warn(problems: list[Problem], format: Format) -> None:
    """Warnings go to stderr (stdout stays the list of errors) and never fail validate."""
    for p in problems:
        if format is Format.github:
            file = _gh_escape(p.path, prop=True)
            message = _gh_escape(p.message)
            sys.stderr.write(f"::warning file={file},line={p.line},col={p.column}::{message}\n")
        else:
            sys.stderr.write(f"{p.path}:{p.line}:{p.column}: warning: {p.message}\n")


def _live_failures(snapshot: Snapshot, format: Format) -> bool:
    """Connect to each declared MCP server and database; report the ones that fail (with
    the server's stderr, or why a read-only database's role is refused)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.connectors.database import check_live as check_databases
    from fim.mcp import check_live

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
            message = _gh_escape(p.message + (f" ({p.hint})" if p.hint else ""))
            file = _gh_escape(p.path, prop=True)
            out.write(f"::error file={file},line={p.line},col={p.column}::{message}\n")
        else:
            out.write(f"{p}\n")
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
    return ", ".join(parts + [_count(n, word) for n, word in counts if n])


# ---------------------------------------------------------------------------- list / show


def _kind(value: str) -> str:
    kind = _PLURAL.get(value.lower(), value.lower())
    if kind not in KIND_ATTRS:
        fail(f"unknown kind '{value}'", f"kinds: {', '.join(KIND_ATTRS)}")
    return kind


def _description(kind: str, item: Any) -> str:
    if kind == "model":
        return item.model
    if kind == "skill":
        return item.meta.description
    return getattr(item, "description", "") or ""


def list_(
    ctx: typer.Context,
    kind: Annotated[
        str | None, typer.Argument(help="agent, connector, skill, workflow, hook, eval or model")
    ] = None,
    project: ProjectOption = None,
) -> None:
    """Table of the project's declarations (kind, name, description)."""
    kinds = [_kind(kind)] if kind else list(KIND_ATTRS)
    snapshot = load_snapshot(ctx, project)
    # deferred: loading rich costs a few ms
    from rich.console import Console
    from rich.table import Table

    table = Table("kind", "name", "description", box=None, pad_edge=False)
    for k in kinds:
        for name, item in sorted(getattr(snapshot, KIND_ATTRS[k]).items()):
            text = _description(k, item)
            if k == "model" and snapshot.model_origins.get(name, "fim.yaml") != "fim.yaml":
                text += f" - from {snapshot.model_origins[name]}"
            table.add_row(k, name, snapshot.mask(text))
    Console(soft_wrap=True).print(table)


def show(
    ctx: typer.Context,
    kind: Annotated[
        str, typer.Argument(help="agent, connector, skill, workflow, hook, eval, model or project")
    ],
    name: Annotated[str | None, typer.Argument(help="Name of the declaration")] = None,
    project: ProjectOption = None,
    prompt: Annotated[
        bool,
        typer.Option(
            "--prompt",
            help="For an agent: the system prompt and tools the model sees, with token counts.",
        ),
    ] = False,
    request: Annotated[
        str | None,
        typer.Option(
            "--request",
            help="With --prompt: run tool selection for this request (one fast-model call) "
            "and show the tools it would get.",
        ),
    ] = None,
) -> None:
    """The compiled declaration as YAML, with secrets masked as ***."""
    snapshot = load_snapshot(ctx, project)
    if request is not None and not prompt:
        fail("--request goes with --prompt", 'fim show agent NAME --prompt --request "..."')
    if prompt:
        if _kind(kind) != "agent" or name is None:
            fail("--prompt shows an agent's prompt", "fim show agent NAME --prompt")
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.run.prompt_report import render_prompt_report
        from fim.run.services import Services

        with user_errors():
            report = render_prompt_report(
                snapshot,
                name,
                Services(
                    root=snapshot.root,
                    state_url=snapshot.project.state,
                    providers=CAPABILITIES,
                ),
                request,
            )
        sys.stdout.write(snapshot.mask(report) + "\n")
        return
    if kind.lower() == "project":
        data: Any = snapshot.project.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif _kind(kind) == "model" and name is None:
        data = {role: _dump("model", m, snapshot, role) for role, m in snapshot.models.items()}
    else:
        k = _kind(kind)
        items = getattr(snapshot, KIND_ATTRS[k])
        if name is None or name not in items:
            # deferred: loading pydantic_core costs tens of ms
            from fim.config.problems import suggest

            hint = suggest(name or "", items, f"{k}s")
            fail(f"unknown {k} '{name}'" if name else f"name the {k} to show", hint)
        data = _dump(k, items[name], snapshot, name)
    sys.stdout.write(to_yaml(masked(data, snapshot)))


def _dump(kind: str, item: Any, snapshot: Snapshot, name: str) -> Any:
    if kind == "model":
        # the effective model (FIM_MODEL / FIM_FAST_MODEL applied) and where it came from
        data = item.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"model": data.pop("model"), "from": snapshot.model_origins.get(name), **data}
    if kind == "skill":
        meta = item.meta.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {
            **meta,
            "name": item.name,
            **({"title": item.meta.name} if item.meta.name != item.name else {}),
            "directory": str(Path(item.directory).relative_to(snapshot.root)),
            "files": list(item.files),
            "body": item.body,
        }
    data = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    if kind == "connector" and data.get("kind") == "http":
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.connectors.http import tool_name

        for action, spec in data.get("actions", {}).items():
            shown = tool_name(name, action)
            if shown != f"{name}__{action}":  # shortened to fit provider limits (64 chars)
                spec["tool"] = shown
    return data


def masked(value: Any, snapshot: Snapshot) -> Any:
    """Mask secrets everywhere and credential fields whatever their source (`fim.masking`)."""
    return snapshot.masker.value(value, keys=True)


def to_yaml(data: Any) -> str:
    """Block-style YAML with multi-line strings as `|` literals (readable instructions)."""

    # deferred: loading ruamel costs tens of ms
    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import LiteralScalarString

    def literal(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: literal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [literal(v) for v in value]
        if isinstance(value, str) and "\n" in value:
            return LiteralScalarString(value)
        return value

    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = False
    yaml.width = 100
    buffer = io.StringIO()
    yaml.dump(literal(data), buffer)
    return buffer.getvalue()


# ---------------------------------------------------------------------------- schema


def schema(
    kind: Annotated[
        str | None, typer.Argument(help="project, agent, connector, skill, workflow, hook or eval")
    ] = None,
    write: Annotated[
        Path | None,
        typer.Option("--write", help="Write <kind>.schema.json files into this directory"),
    ] = None,
) -> None:
    """JSON Schema of the declaration kinds, for editor autocompletion."""
    # deferred: loading fim.config.export (pkgutil, inspect) costs a few ms of fim validate
    from fim.config.export import SCHEMA_KINDS, json_schema, schema_filename

    if kind is not None and kind not in SCHEMA_KINDS:
        # deferred: loading pydantic_core costs tens of ms
        from fim.config.problems import suggest

        fail(f"unknown kind '{kind}'", suggest(kind, SCHEMA_KINDS, "kinds"))
    kinds = [kind] if kind else list(SCHEMA_KINDS)
    if write is None:
        data = json_schema(kinds[0]) if kind else {k: json_schema(k) for k in kinds}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    write.mkdir(parents=True, exist_ok=True)
    for k in kinds:
        (write / schema_filename(k)).write_text(json.dumps(json_schema(k), indent=2) + "\n")
    sys.stdout.write(
        f"wrote {len(kinds)} schema file(s) to {write}\n"
        "add the matching line at the top of a YAML file, e.g.:\n"
    )
    for k in kinds:
        sys.stdout.write(f"  # yaml-language-server: $schema={(write / schema_filename(k))}\n")


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
    here = target == Path.cwd().resolve()
    sys.stdout.write(f"next: {'' if here else f'cd {directory} && '}fim validate && fim list\n")
