"""`fim connector import SPEC --name NAME`: write a connector from an OpenAPI 3 document.

The output is a starting point for review, not a finished declaration: secrets become
`${NAME_TOKEN}`-style variables, deletes are `admin` with `requires_confirmation`, and the
file is validated against the connector schema before it is written.
"""

from __future__ import annotations

import contextlib
import gc
import re
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from fim.commands import ProjectOption, err, fail, project_dir
from fim.errors import ConfigError


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Create and inspect connectors.", no_args_is_help=True)
    group.command("import")(import_)
    app.add_typer(group, name="connector")


def import_(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="OpenAPI 3 document (YAML or JSON).")],
    name: Annotated[str, typer.Option("--name", "-n", help="Connector name (file stem).")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Where to write (default: connectors/NAME.yaml in the project; '-' prints).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    project: ProjectOption = None,
) -> None:
    """Write an HTTP connector with one action per OpenAPI operation."""
    # deferred: loading pydantic_core costs tens of ms
    from pydantic import ValidationError

    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.schema import HttpConnector
    from fim.connectors.openapi import (
        OpenApiError,
        dump_yaml,
        import_openapi,
        load_document,
        summary,
    )

    if not name.replace("_", "").replace("-", "").isalnum():
        fail(f"invalid connector name '{name}'", "use letters, digits, '_' or '-'")
    if _URL.match(str(spec)):  # a Path argument already made `https://` into `https:/`
        url = _URL.sub(lambda m: m.group(1) + "://", str(spec), count=1)
        local = f"{name}.openapi{_extension(url)}"
        fail(
            f"cannot import from a URL ({url}): fim reads a local file",
            f"download it first: curl -fsSL -o {local} '{url}', then "
            f"fim connector import {local} --name {name}",
        )
    warnings: list[str] = []
    gc.disable()  # millions of short-lived nodes and no cycles: collections only cost time
    try:
        decl = import_openapi(load_document(spec, warnings), name, warnings)
    except OpenApiError as exc:
        _fail_lines(_positioned(spec, str(exc)))
    except RecursionError:
        fail(f"{spec}: {_TOO_DEEP}")
    finally:
        gc.enable()
    for warning in warnings:  # they quote the document: escaped, as every line of fim's
        err(f"warning: {warning}")
    try:
        HttpConnector.model_validate(decl)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        fail(f"the imported connector is not valid at {where}: {first['msg']}")
    gc.disable()
    try:
        text = dump_yaml(decl, spec.name)
    except RecursionError:  # a `default` or `enum` value copied as deep as `json` reads
        fail(f"{spec}: {_TOO_DEEP}")
    finally:
        gc.enable()
    if out is not None and str(out) == "-":
        sys.stdout.write(text)
        _next_steps(text, name, err=True)
        return
    target = out or _default_target(ctx, project, name)
    if target.exists() and not force:
        fail(f"{target} exists", "pass --force to overwrite it, or --out another path")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {target}: {summary(decl)}")
    _next_steps(text, name)


_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+")
"""`https://...` as typed, or as `Path` left it (`https:/...`); two letters or more, so a
Windows drive (`C:/`) is a path."""


def _extension(url: str) -> str:
    """The spec's own extension (`.yml` for `.../forecast.yml`), `.json` when the URL's
    path has none of `.json`, `.yaml`, `.yml` (the content is sniffed either way)."""
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    found = re.search(r"\.(json|ya?ml)$", path)
    return f".{found.group(1)}" if found else ".json"


_NEEDED = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A `${VAR}` without default: the connector is unavailable until VAR is exported."""


def _next_steps(text: str, name: str, err: bool = False) -> None:
    """What the user must do before an agent can use the connector: the variables it needs
    (unset, the connector is unavailable: agents that use it fail, `fim validate` warns),
    and how to give it to an agent. A variable of `base_url` is offered a local address to
    develop with: an empty one is no URL, and every call would fail."""
    # deferred: the config modules load only when a connector was written
    from fim.config.interpolate import while_developing

    base = re.search(r"^base_url:(.*)$", text, re.MULTILINE)
    in_url = set(_NEEDED.findall(base.group(1))) if base else set()
    for var in dict.fromkeys(_NEEDED.findall(text)):
        default = while_developing(var, url=var in in_url)
        what = " (the API's address)" if var in in_url else ""
        typer.echo(f"needs {var}{what}: export it, or write {default} while developing", err=err)
    typer.echo(f"next: add 'connectors: [{name}]' to an agent, then `fim validate`", err=err)


_TOO_DEEP = "the document nests too deeply to import (flatten its deepest values)"


def _positioned(spec: Path, message: str) -> str:
    """`spec:line:col: message` for an import error found while walking the document's
    data (which has no positions), when the text shows where; the message unchanged
    otherwise (a parse error already has its position)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.connectors.openapi.document import locate

    if message.startswith(str(spec)):
        return message
    try:
        found = locate(spec.read_text(encoding="utf-8-sig"), message)
    except (OSError, UnicodeDecodeError):
        found = None
    where = f"{spec}:{found[0]}:{found[1]}" if found else str(spec)
    return f"{where}: {message}"


def _fail_lines(message: str) -> NoReturn:
    """Stop with an `error:` line per line of `message`: a YAML spec's problems are all
    reported at once, each as `file:line:col: message (hint)`."""
    *before, last = message.splitlines() or [message]
    for line in before:
        err(f"error: {line}")
    fail(last)


def _default_target(ctx: typer.Context, project: Path | None, name: str) -> Path:
    """connectors/NAME.yaml under the project root (nearest fim.yaml), else under cwd."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.loader import find_root

    root = project_dir(ctx, project)
    if root is None:
        try:
            root = find_root()
        except ConfigError:
            return Path.cwd() / "connectors" / f"{name}.yaml"
    folder = "connectors"
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.connectors.openapi import OpenApiError, load_document

    with contextlib.suppress(OpenApiError):  # a broken fim.yaml is `fim validate`'s to report
        paths = load_document(root / "fim.yaml").get("paths") or {}
        folder = str(paths.get("connectors") or folder)
    return root / folder / f"{name}.yaml"
