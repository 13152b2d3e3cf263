"""Declaration commands: `fim list`, `fim show`, `fim schema`.

They read the compiled project (or the declaration models) and print it; split from
`fim.commands.project` (init, validate) so each file stays one concept. Like those, they
never import the model, MCP or database libraries: `fim.cli.main` runs them as one-shot
commands with only this module loaded.

What they print is someone else's text (a copied skill, an imported OpenAPI spec), so it
goes out through `fim.terminal` like a model's answer: an escape sequence in a skill is
shown, not obeyed (OSC 52 wrote the clipboard; `ESC [8m` hid from the reviewer reading
`fim show skill` the sentences the model reads).
"""

from __future__ import annotations

import io
import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import ProjectOption, fail, load_snapshot, user_errors
from fim.config.serving import MODELS, need_settings, settings_needed
from fim.terminal import markup, printable, rich_console

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


def register(app: typer.Typer) -> None:
    app.command("list")(list_)
    app.command("show")(show)
    app.command("schema")(schema)


# ---------------------------------------------------------------------------- list / show


def _list_kinds(incomplete: str) -> list[str]:
    """`fim list <TAB>` (`fim.commands.completion` does the other arguments; this module
    stays the only one `fim list|show|schema` load)."""
    return [kind for kind in KIND_ATTRS if kind.startswith(incomplete)]


def _show_kinds(incomplete: str) -> list[str]:
    """`fim show <TAB>`: the kinds, and `project`."""
    return [kind for kind in (*KIND_ATTRS, "project") if kind.startswith(incomplete)]


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
        str | None,
        typer.Argument(
            help="agent, connector, skill, workflow, hook, eval or model",
            autocompletion=_list_kinds,
        ),
    ] = None,
    project: ProjectOption = None,
) -> None:
    """Table of the project's declarations (kind, name, description)."""
    kinds = [_kind(kind)] if kind else list(KIND_ATTRS)
    snapshot = load_snapshot(ctx, project)
    # deferred: loading rich costs a few ms
    from rich.table import Table

    table = Table("kind", "name", "description", box=None, pad_edge=False)
    for k in kinds:
        for name, item in sorted(getattr(snapshot, KIND_ATTRS[k]).items()):
            text = _description(k, item)
            if k == "model" and snapshot.model_origins.get(name, "fim.yaml") != "fim.yaml":
                text += f" - from {snapshot.model_origins[name]}"
            table.add_row(k, markup(name), markup(snapshot.mask(text)))
    rich_console(soft_wrap=True).print(table)


def show(
    ctx: typer.Context,
    kind: Annotated[
        str,
        typer.Argument(
            help="agent, connector, skill, workflow, hook, eval, model or project",
            autocompletion=_show_kinds,
        ),
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
    if request is not None:  # tool selection calls the fast model: its settings are needed
        need_settings(settings_needed() | {MODELS})
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
        sys.stdout.write(printable(snapshot.mask(report)) + "\n")
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
    sys.stdout.write(printable(to_yaml(masked(data, snapshot))))


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
        from fim.connectors.http_tool import tool_name

        for action, spec in data.get("actions", {}).items():
            shown = tool_name(name, action)
            if shown != f"{name}__{action}":  # shortened to fit provider limits (64 chars)
                spec["tool"] = shown
    return data


def masked(value: Any, snapshot: Snapshot) -> Any:
    """Mask secrets everywhere and credential fields whatever their source (`fim.masking`)."""
    return snapshot.masker.value(value, keys=True)


def to_yaml(data: Any) -> str:
    """Block-style YAML with multi-line strings as `|` literals (readable instructions).

    A string with control characters is not made a literal: a `|` block holds them raw,
    double quotes write them as YAML escapes (`\\e`), which read back as the same text."""

    # deferred: loading ruamel costs tens of ms
    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import LiteralScalarString

    def literal(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: literal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [literal(v) for v in value]
        if isinstance(value, str) and "\n" in value and printable(value) == value:
            return LiteralScalarString(value)
        return value

    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = False
    yaml.width = 100
    buffer = io.StringIO()
    yaml.dump(literal(data), buffer)
    return buffer.getvalue()


# ---------------------------------------------------------------------------- schema


def _schema_kinds(incomplete: str) -> list[str]:
    """`fim schema <TAB>`: the kinds that have a JSON Schema."""
    # deferred: loading fim.config.export (pkgutil, inspect) costs a few ms of fim validate
    from fim.config.export import SCHEMA_KINDS

    return [kind for kind in SCHEMA_KINDS if kind.startswith(incomplete)]


class SchemaFormat(StrEnum):
    json = "json"
    text = "text"


def schema(
    kind: Annotated[
        str | None,
        typer.Argument(
            help="project, agent, connector, skill, workflow, hook or eval",
            autocompletion=_schema_kinds,
        ),
    ] = None,
    write: Annotated[
        Path | None,
        typer.Option("--write", help="Write <kind>.schema.json files into this directory"),
    ] = None,
    format: Annotated[
        SchemaFormat,
        typer.Option(
            "--format",
            help="json: the JSON Schema (what editors read); text: one line per field "
            "(name: type — what it is), nested fields indented",
        ),
    ] = SchemaFormat.json,
) -> None:
    """JSON Schema of the declaration kinds, for editor autocompletion.

    `--format text` lists every field with its description, one line each."""
    # deferred: loading fim.config.export (pkgutil, inspect) costs a few ms of fim validate
    from fim.config.export import SCHEMA_KINDS, json_schema, schema_filename

    if kind is not None and kind not in SCHEMA_KINDS:
        # deferred: loading pydantic_core costs tens of ms
        from fim.config.problems import suggest

        fail(f"unknown kind '{kind}'", suggest(kind, SCHEMA_KINDS, "kinds"))
    kinds = [kind] if kind else list(SCHEMA_KINDS)
    if format is SchemaFormat.text:
        if write is not None:
            fail("--write writes JSON Schemas", "leave out --format text with --write")
        # deferred: only --format text renders the schema as text
        from fim.config.schema_text import schema_text

        sys.stdout.write("\n".join(schema_text(json_schema(k)) for k in kinds))
        return
    if write is None:
        data = json_schema(kinds[0]) if kind else {k: json_schema(k) for k in kinds}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    # deferred: loading fim.config.files is only for --write
    from fim.config.files import write_inside
    from fim.scaffold.editor import SCHEMA_GLOBS

    if kind is None:  # what `fim init` writes: the kinds an editor attaches to YAML files
        kinds = [k for k in kinds if k in SCHEMA_GLOBS]

    here = Path.cwd()
    target = here / write  # an absolute `write` stays itself
    # never through a link under the folder it was run in (a checkout's `.fim` link); a
    # folder named elsewhere is taken as named, its files replaced rather than written through
    base = here if target.is_relative_to(here) else target
    try:
        if base is target:
            target.mkdir(parents=True, exist_ok=True)
        for k in kinds:
            path = target / schema_filename(k)
            write_inside(base, path, json.dumps(json_schema(k), indent=2) + "\n")
    except OSError as exc:
        fail(f"cannot write the schemas: {exc.strerror or exc}", "write to a folder, not a link")
    sys.stdout.write(f"wrote {len(kinds)} schema file(s) to {write}\n")
    sys.stdout.write(editor_setup(write.resolve(), kinds))


def editor_setup(schemas: Path, kinds: list[str]) -> str:
    """How to attach the written schemas in an editor, for the project around the current
    directory: the modeline of each kind, whose path yaml-language-server resolves against
    the YAML file's own folder (so `../.schemas/agent.schema.json` in agents/), and the
    same as VS Code's `yaml.schemas` setting, relative to the project root."""
    root = next((d for d in (Path.cwd(), *Path.cwd().parents) if (d / "fim.yaml").is_file()), None)
    base = (root or Path.cwd()).resolve()
    # deferred: loading fim.config.export (pkgutil, inspect) costs a few ms of fim validate
    from fim.config.export import schema_filename

    # deferred: the editor set-up of `fim init` (the same globs), only for --write
    from fim.scaffold.editor import SCHEMA_GLOBS

    lines = ["add the line of its kind at the top of a YAML file:\n"]
    settings: dict[str, list[str]] = {}
    for k in kinds:
        if k not in SCHEMA_GLOBS:  # a skill is SKILL.md front matter: no YAML file to attach
            continue
        files = SCHEMA_GLOBS[k][0]
        folder = (base / files).parent
        target = schemas / schema_filename(k)
        relative = os.path.relpath(target, folder)
        lines.append(f"  {files:<18} # yaml-language-server: $schema={relative}\n")
        settings[os.path.relpath(target, base)] = SCHEMA_GLOBS[k]
    lines.append(
        "or, for VS Code (Red Hat YAML extension), in .vscode/settings.json:\n"
        + json.dumps({"yaml.schemas": settings}, indent=2)
        + "\n"
    )
    return "".join(lines)
