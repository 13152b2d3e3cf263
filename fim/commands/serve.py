"""`fim serve`: the HTTP API with hot reload."""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fim.commands import ProjectOption, err, load_snapshot, user_errors

if TYPE_CHECKING:
    from fim.build.gitops import GitSource
    from fim.build.snapshot import Snapshot


class LogFormat(StrEnum):
    text = "text"
    json = "json"


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
    log_format: Annotated[
        LogFormat,
        typer.Option(help="text, or json: one JSON object per line with trace and span ids."),
    ] = LogFormat.text,
    project: ProjectOption = None,
    git: GitOption = None,
    ref: RefOption = "main",
    interval: IntervalOption = "30s",
    git_checkout: CheckoutOption = None,
    git_path: GitPathOption = "",
    workers: Annotated[
        int,
        typer.Option(
            min=1, help="Processes sharing the port, each with its own snapshot (needs PostgreSQL)."
        ),
    ] = 1,
    shutdown_timeout: ShutdownOption = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated addresses/networks of proxies whose X-Forwarded-* headers are "
            "trusted ('*': any; default: fim.yaml server.trusted_proxies, 127.0.0.1).",
            show_default=False,
        ),
    ] = None,
    root_path: Annotated[
        str | None,
        typer.Option(
            help="Path prefix a reverse proxy serves fim under, e.g. /fim (default: fim.yaml "
            "server.root_path).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve agents and workflows over HTTP (OpenAI-compatible too)."""
    # deferred: loading fim.observe costs a few ms
    from fim.observe.logs import configure
    from fim.server import run
    from fim.server import serve as run_server

    configure(log_level, log_format.value)
    with user_errors():
        proxies, prefix = proxy_flags(forwarded_allow_ips, root_path)
    if workers > 1:  # uvicorn's supervisor, one snapshot and watcher per worker
        # deferred: `fim --help` imports every command module
        from fim.server.workers import serve_workers

        with user_errors():
            if git is not None:
                # deferred: `fim --help` imports every command module
                from fim.errors import RunError

                raise RunError(
                    "--workers and --git do not combine: a git checkout belongs to one process",
                    hint="run several `fim serve --git` replicas (each its own --git-checkout)",
                )
        snapshot = load_snapshot(ctx, project)
        for line in keyless_agents(snapshot):
            err(line)
        with user_errors(), contextlib.suppress(KeyboardInterrupt):
            serve_workers(
                snapshot.root,
                workers=workers,
                host=host,
                port=port,
                reload=reload,
                log_level=log_level,
                json_logs=log_format is LogFormat.json,
                shutdown_timeout=shutdown_timeout,
                trusted_proxies=proxies,
                root_path=prefix,
            )
        return
    if git is not None:  # GitOps pull: the project comes from the remote, not --project
        with user_errors():
            source, seconds = git_source(git, ref, interval, git_checkout, git_path)
        with user_errors(), contextlib.suppress(KeyboardInterrupt):
            run(  # on uvloop where installed (fim.server.event_loop_factory)
                run_server(
                    source.root,
                    host=host,
                    port=port,
                    log_level=log_level,
                    git=source,
                    git_interval=seconds,
                    json_logs=log_format is LogFormat.json,
                    shutdown_timeout=shutdown_timeout,
                    trusted_proxies=proxies,
                    root_path=prefix,
                )
            )
        return
    snapshot = load_snapshot(ctx, project)  # reports config errors before binding a port
    for line in keyless_agents(snapshot):
        err(line)
    with user_errors(), contextlib.suppress(KeyboardInterrupt):
        run(  # on uvloop where installed (fim.server.event_loop_factory)
            run_server(
                snapshot.root,
                host=host,
                port=port,
                reload=reload,
                log_level=log_level,
                json_logs=log_format is LogFormat.json,
                shutdown_timeout=shutdown_timeout,
                trusted_proxies=proxies,
                root_path=prefix,
            )
        )


def proxy_flags(
    allow_ips: str | None, root_path: str | None
) -> tuple[list[str] | None, str | None]:
    """`--forwarded-allow-ips` as a list and `--root-path` normalised, each checked like
    its fim.yaml setting (one line naming the flag when wrong); None where not given."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.schema.server import root_prefix, trusted_network
    from fim.errors import RunError

    try:
        proxies = None
        if allow_ips is not None:
            proxies = [trusted_network(item) for item in allow_ips.split(",") if item.strip()]
    except ValueError as exc:
        raise RunError(f"--forwarded-allow-ips: {exc}") from None
    try:
        prefix = None if root_path is None else root_prefix(root_path)
    except ValueError as exc:
        raise RunError(f"--root-path: {exc}") from None
    return proxies, prefix


def keyless_agents(snapshot: Snapshot) -> list[str]:
    """Warnings for the agents whose model's API key is not set, one line per missing
    variable: the server starts (other agents work, and the key may come later), but a
    client of those agents would only learn it from a failed request."""
    # deferred: loading the model backends costs tens of ms
    from fim.errors import RunError
    from fim.llm.base import KEY_ENV, provider_of
    from fim.run.auto import AUTO, auto_agent
    from fim.run.preflight import key_problem

    declared = dict(snapshot.agents)
    if len(declared) > 1 and AUTO not in declared:  # `model: "auto"`, as GET /v1/models lists it
        declared[AUTO] = auto_agent(snapshot)
    missing: dict[str, list[str]] = {}
    for name, agent in declared.items():
        try:
            settings = snapshot.model_settings(agent.model)
        except RunError:  # an unknown role: `fim validate` reports it
            continue
        if key_problem(settings) is None:
            continue
        names = KEY_ENV.get(provider_of(settings.model), ())
        missing.setdefault(" or ".join(names) or f"a key for {settings.model}", []).append(name)
    return [
        f"warning: {'agent' if len(agents) == 1 else 'agents'} {', '.join(agents)} "
        f"{'needs' if len(agents) == 1 else 'need'} {variable} (unset); their runs fail "
        "until it is set (or FIM_MODEL=ollama/qwen2.5 for a local model)"
        for variable, agents in missing.items()
    ]


GitOption = Annotated[
    str | None,
    typer.Option(
        "--git",
        help="Serve the project from this git remote (GitOps pull) instead of a directory.",
    ),
]
RefOption = Annotated[str, typer.Option("--ref", help="Branch or tag to follow with --git.")]
IntervalOption = Annotated[
    str, typer.Option("--interval", help="How often --git fetches (30s, 2m, ...).")
]
CheckoutOption = Annotated[
    Path | None,
    typer.Option(
        "--git-checkout",
        help="Local checkout directory for --git (default: ~/.cache/fim/git/<hash of URL>).",
        show_default=False,
    ),
]
GitPathOption = Annotated[
    str, typer.Option("--git-path", help="Directory of fim.yaml inside the repository.")
]
ShutdownOption = Annotated[
    float | None,
    typer.Option(
        "--shutdown-timeout",
        min=0,
        max=86_400,
        help="Seconds a stop (SIGTERM) waits for the runs in flight before cutting them "
        "(default: fim.yaml server.shutdown_timeout, 30).",
        show_default=False,
    ),
]


def git_source(
    url: str, ref: str, interval: str, checkout: Path | None, subdir: str
) -> tuple[GitSource, float]:
    """The GitOps source and poll interval of `fim serve/worker --git` (shared options)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.gitops import GitSource, parse_interval

    seconds = parse_interval(interval)
    return GitSource(url=url, ref=ref, checkout=checkout, subdir=subdir), seconds
