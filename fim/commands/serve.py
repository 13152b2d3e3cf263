"""`fim serve`: the HTTP API with hot reload."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim import private
from fim.commands import ProjectOption, err, load_snapshot, project_dir, user_errors

if TYPE_CHECKING:
    from fim.build.gitops import GitSource
    from fim.build.snapshot import Snapshot


class LogFormat(StrEnum):
    text = "text"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("serve")(json_lines(serve))


def json_lines(command: Callable[..., None]) -> Callable[..., None]:
    """`command` (`fim serve`) with, under `--log-format json`, every line it writes to
    stderr before and beside its log (start-up warnings, the validation failures at start,
    `error: git clone failed ...`) as a JSON record (`fim.observe.logs.json_stderr`)."""

    @functools.wraps(command)
    def lines(*args: Any, **options: Any) -> None:
        # deferred: loading fim.observe costs a few ms
        from fim.observe.logs import json_stderr

        with json_stderr(options.get("log_format") is LogFormat.json):
            command(*args, **options)

    return lines


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None,
        typer.Option(envvar="FIM_HOST", help="Bind address (default: fim.yaml, 127.0.0.1)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            envvar=["FIM_PORT", "PORT"],  # PORT: as Cloud Run and Heroku set it
            help="Port (default: fim.yaml, 8000; PORT as Cloud Run and Heroku set it).",
        ),
    ] = None,
    reload: Annotated[
        bool, typer.Option("--reload/--no-reload", help="Recompile and swap on file changes.")
    ] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    log_format: Annotated[
        LogFormat,
        typer.Option(
            envvar="FIM_LOG_FORMAT",
            help="text, or json: one JSON object per line with trace and span ids.",
        ),
    ] = LogFormat.text,
    project: ProjectOption = None,
    git: GitOption = None,
    ref: RefOption = "main",
    interval: IntervalOption = "30s",
    git_checkout: CheckoutOption = None,
    git_path: GitPathOption = "",
    git_fallback: FallbackOption = "none",
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="FIM_WORKERS",
            help="Processes sharing the port, each with its own snapshot (needs PostgreSQL).",
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
        for line in start_warnings(snapshot):
            err(line)
        with user_errors(), contextlib.suppress(KeyboardInterrupt):
            serve_workers(
                followed_root(project_dir(ctx, project), snapshot.root),
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
            source, seconds = git_source(
                git, ref, interval, git_checkout, git_path, fallback=git_fallback
            )
        with user_errors(), contextlib.suppress(KeyboardInterrupt):
            run(  # on uvloop where installed (fim.server.event_loop_factory)
                run_server(
                    source.root,
                    host=host,
                    port=port,
                    log_level=log_level,
                    git=source,
                    git_interval=seconds,
                    warn=warn_at_start,
                    json_logs=log_format is LogFormat.json,
                    shutdown_timeout=shutdown_timeout,
                    trusted_proxies=proxies,
                    root_path=prefix,
                )
            )
        return
    snapshot = load_snapshot(ctx, project)  # reports config errors before binding a port
    for line in start_warnings(snapshot):
        err(line)
    if snapshot.command_hooks:  # a read-only project's transcripts: where, said at start
        private.transcripts(snapshot.root)
    with user_errors(), contextlib.suppress(KeyboardInterrupt):
        run(  # on uvloop where installed (fim.server.event_loop_factory)
            run_server(
                followed_root(project_dir(ctx, project), snapshot.root),
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


def followed_root(given: Path | None, resolved: Path) -> Path:
    """The project directory to serve and watch: the `--project` path as given when it
    reaches the project through a symlink (git-sync's `/git/current -> rev-N`), so each
    reload resolves it again and the watcher follows a flip of the link; else `resolved`."""
    if given is None:
        return resolved
    path = Path(os.path.normpath(Path(given).expanduser().absolute()))
    return path if path != resolved and path.resolve() == resolved else resolved


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


def warn_at_start(snapshot: Snapshot) -> None:
    """Write `start_warnings` to stderr (`--git`: once the first commit is compiled)."""
    for line in start_warnings(snapshot):
        err(line)


def start_warnings(snapshot: Snapshot) -> list[str]:
    """What `fim serve` warns of at start: agents whose model key is unset
    (`keyless_agents`) and connectors and MCP servers unavailable here (`unavailable_lines`)."""
    return [*keyless_agents(snapshot), *unavailable_lines(snapshot)]


def unavailable_lines(snapshot: Snapshot) -> list[str]:
    """One warning per connector or MCP server left out for an unset `${VAR}`, naming the
    variable, its declaration and the agents whose runs are refused until it is set (a
    503 `connector_unavailable`): the server starts, as for a missing model key, but its
    operator learns it now, not from a client's failed request (newcomer-52 #5)."""
    lines = []
    kinds = (("connector", snapshot.unavailable_connectors), ("mcp", snapshot.unavailable_mcp))
    for kind, found in (*kinds, ("a2a", snapshot.unavailable_a2a)):
        for name in found:
            if (problem := snapshot.unavailable(kind, name)) is None:
                continue
            uses = {"connector": "connectors", "mcp": "mcp", "a2a": "delegates"}[kind]
            agents = [a for a, decl in snapshot.agents.items() if name in getattr(decl, uses)]
            one = len(agents) == 1
            users = (
                f"; {'agent' if one else 'agents'} {', '.join(agents)} "
                f"{'is' if one else 'are'} refused until it is set"
                if agents
                else "; no agent uses it"
            )
            lines.append(f"warning: {problem.message}{users} ({problem.hint})")
    return lines


def keyless_agents(snapshot: Snapshot) -> list[str]:
    """Warnings for the agents whose model's API key is not set, one line per missing
    variable: the server starts (other agents work, and the key may come later), but a
    client of those agents would only learn it from a failed request. The `auto` router
    fim adds over a project's agents has a line of its own: nobody declared it, and it runs
    on `models.general`, which agents on scripted or local models never use (newcomer-53
    #16: "agent auto needs OPENAI_API_KEY" in such a project read as a broken agent)."""
    # deferred: loading the model backends costs tens of ms
    from fim.run.auto import AUTO, auto_agent

    missing: dict[str, list[str]] = {}
    for name, agent in snapshot.agents.items():
        if (variable := _key_needed(snapshot, agent.model)) is not None:
            missing.setdefault(variable, []).append(name)
    lines = [
        f"warning: {'agent' if len(agents) == 1 else 'agents'} {', '.join(agents)} "
        f"{'needs' if len(agents) == 1 else 'need'} {variable} (unset); their runs fail "
        "until it is set (or FIM_MODEL=ollama/qwen2.5 for a local model)"
        for variable, agents in missing.items()
    ]
    implicit = len(snapshot.agents) > 1 and AUTO not in snapshot.agents  # as /v1/models says
    router = auto_agent(snapshot).model if implicit else None
    if router is not None and (variable := _key_needed(snapshot, router)) is not None:
        model = snapshot.model_settings(router).model
        alone = "" if variable in missing else "; none of your agents needs it"
        lines.append(
            "warning: auto, the router fim serves over your agents (`model: auto` over HTTP, "
            f"`fim run --auto`), runs on models.general ({model}), which needs {variable} "
            f"(unset): its runs fail until it is set{alone} (set models.general in fim.yaml "
            "to a model you have, or FIM_MODEL=ollama/qwen2.5)"
        )
    return lines


def _key_needed(snapshot: Snapshot, ref: Any) -> str | None:
    """The variable(s) the model `ref` needs and that are unset here, or None."""
    # deferred: loading the model backends costs tens of ms
    from fim.errors import RunError
    from fim.llm.base import KEY_ENV, provider_of
    from fim.run.preflight import key_problem

    try:
        settings = snapshot.model_settings(ref)
    except RunError:  # an unknown role: `fim validate` reports it
        return None
    if key_problem(settings) is None:
        return None
    return " or ".join(KEY_ENV.get(provider_of(settings.model), ())) or (
        f"a key for {settings.model}"
    )


GitOption = Annotated[
    str | None,
    typer.Option(
        "--git",
        envvar="FIM_GIT_URL",
        help="Serve the project from this git remote (GitOps pull) instead of a directory.",
    ),
]
RefOption = Annotated[
    str, typer.Option("--ref", envvar="FIM_GIT_REF", help="Branch or tag to follow with --git.")
]
IntervalOption = Annotated[
    str,
    typer.Option(
        "--interval", envvar="FIM_GIT_INTERVAL", help="How often --git fetches (30s, 2m, ...)."
    ),
]
CheckoutOption = Annotated[
    Path | None,
    typer.Option(
        "--git-checkout",
        envvar="FIM_GIT_CHECKOUT",
        help="Local checkout directory for --git (default: ~/.cache/fim/git/<hash of URL>).",
        show_default=False,
    ),
]
GitPathOption = Annotated[
    str,
    typer.Option(
        "--git-path", envvar="FIM_GIT_PATH", help="Directory of fim.yaml inside the repository."
    ),
]
FallbackOption = Annotated[
    str,
    typer.Option(
        "--git-fallback",
        envvar="FIM_GIT_FALLBACK",
        help="none, or last-good: when the ref's HEAD does not compile at start, serve the "
        "last commit that did (recorded in the state store by any replica), report the "
        "rejected one in /v1/status and keep polling.",
    ),
]
ShutdownOption = Annotated[
    float | None,
    typer.Option(
        "--shutdown-timeout",
        envvar="FIM_SHUTDOWN_TIMEOUT",
        min=0,
        max=86_400,
        help="Seconds a stop (SIGTERM) waits for the runs in flight before cutting them "
        "(default: fim.yaml server.shutdown_timeout, 30).",
        show_default=False,
    ),
]


def git_source(
    url: str,
    ref: str,
    interval: str,
    checkout: Path | None,
    subdir: str,
    *,
    fallback: str = "none",
) -> tuple[GitSource, float]:
    """The GitOps source and poll interval of `fim serve/worker --git` (shared options)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.gitops import GitSource, parse_interval

    seconds = parse_interval(interval)
    source = GitSource(url=url, ref=ref, checkout=checkout, subdir=subdir, fallback=fallback)
    return source, seconds
