"""`fim connector import SPEC --name NAME`: write a connector from an OpenAPI 3 document.

The output is a starting point for review, not a finished declaration: secrets become
`${NAME_TOKEN}`-style variables, deletes are `admin` with `requires_confirmation`, and the
file is validated against the connector schema before it is written.
"""

from __future__ import annotations

import contextlib
import gc
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
    warnings: list[str] = []
    gc.disable()  # millions of short-lived nodes and no cycles: collections only cost time
    try:
        decl = import_openapi(load_document(spec, warnings), name, warnings)
    except OpenApiError as exc:
        _fail_lines(str(exc))
    except RecursionError:
        fail(f"{spec}: {_TOO_DEEP}")
    finally:
        gc.enable()
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
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
        return
    target = out or _default_target(ctx, project, name)
    if target.exists() and not force:
        fail(f"{target} exists", "pass --force to overwrite it, or --out another path")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {target}: {summary(decl)}")


_TOO_DEEP = "the document nests too deeply to import (flatten its deepest values)"


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
