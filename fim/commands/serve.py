"""`fim serve`: the HTTP API with hot reload."""

from __future__ import annotations

import contextlib
import logging
from typing import Annotated

import typer

from fim.commands import ProjectOption, load_snapshot, run_async, user_errors


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option(help="Bind address (default: fim.yaml, 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: fim.yaml, 8000).")] = None,
    reload: Annotated[
        bool, typer.Option("--reload/--no-reload", help="Recompile and swap on file changes.")
    ] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    project: ProjectOption = None,
) -> None:
    """Serve agents and workflows over HTTP (OpenAI-compatible too)."""
    from fim.server import serve as run_server

    snapshot = load_snapshot(ctx, project)  # reports config errors before binding a port
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    with user_errors(), contextlib.suppress(KeyboardInterrupt):
        run_async(
            run_server(snapshot.root, host=host, port=port, reload=reload, log_level=log_level)
        )
