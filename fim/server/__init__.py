"""`fim serve`: the HTTP API on uvicorn, with hot reload and graceful shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fim import observe, private
from fim.errors import RunError
from fim.hosts import is_loopback, listen
from fim.tasks import spawn

if TYPE_CHECKING:
    from fim.build.gitops import GitSource

log = logging.getLogger("fim.server")

T = TypeVar("T")


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop where it is installed (a dependency on Linux and macOS), else None
    (asyncio's own). A served run is mostly loop work (its requests to the model, the
    client's request, the tasks between them) and uvloop's costs less CPU per run;
    FIM_EVENT_LOOP=asyncio keeps asyncio's, e.g. to rule the loop out of a bug hunt."""
    if os.environ.get("FIM_EVENT_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        # deferred: a third-party package, loaded only when this path runs
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def uvicorn_loop() -> str:
    """uvicorn's `loop` setting for the worker processes of `--workers N` (their loop is
    uvicorn's to make): the same choice as `event_loop_factory`."""
    return "asyncio" if event_loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `fim serve`'s coroutine to completion on `event_loop_factory()`'s loop."""
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(main)


async def serve(
    root: Path,
    *,
    host: str | None = None,
    port: int | None = None,
    reload: bool = True,
    log_level: str = "info",
    ready: asyncio.Event | None = None,
    git: GitSource | None = None,
    git_interval: float = 30.0,
    json_logs: bool = False,
    shutdown_timeout: float | None = None,
    trusted_proxies: list[str] | None = None,
    root_path: str | None = None,
    warn: Callable[[Any], object] | None = None,
) -> None:
    """Compile, serve, watch; on SIGTERM/SIGINT stop accepting, let runs finish (bounded:
    `shutdown_timeout`, else `server.shutdown_timeout`), stop MCP servers and return.
    `trusted_proxies` and `root_path` override fim.yaml's `server.*` like the bound.
    `warn` is shown the first snapshot of `git` (`fim serve`'s start-up warnings)."""
    # deferred: loading click costs tens of ms
    import uvicorn

    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder, reload_on_hangup, watch
    from fim.capabilities import CAPABILITIES
    from fim.events import build_validators
    from fim.hooks.command_output import build_validators as build_hook_validators
    from fim.llm import preload
    from fim.run.services import Services
    from fim.server.app import create_app, reload_gate
    from fim.server.proxy import behind
    from fim.server.stopping import begin, settle

    if git is not None:  # GitOps pull (fim.build.gitops): the root is the served checkout
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.build.gitops import initial_snapshot

        snapshot = await asyncio.to_thread(initial_snapshot, git)
        root = git.root
        if warn is not None:
            warn(snapshot)
    else:
        snapshot = await asyncio.to_thread(compile_project, root)
    build_validators()
    build_hook_validators()
    observe.warm(snapshot.project.name)
    settle_heap()
    preload(snapshot.models_in_use())
    # deferred: loading fim.masking costs tens of ms
    from fim.store.single import claim_sqlite

    lock = claim_sqlite(snapshot.project.state, root)  # SQLite: one server per store
    holder = SnapshotHolder(snapshot)
    services = Services(root=root, state_url=snapshot.project.state, providers=CAPABILITIES)
    # deferred: loading fim.store costs a few ms
    from fim.store import get_store
    from fim.store.health import open_or_fail

    # a wrong store, or a role without fim's privileges, fails here in one line, not each run
    await asyncio.to_thread(open_or_fail, get_store(services))
    holder.listeners.append(lambda old, new: _on_swap(services, old, new))
    app = create_app(holder, services)
    settings = snapshot.project.server
    host, port, sock = listen_on(settings, host, port)
    services.local = is_loopback(host)  # another address: runs keep no content (fim.run.capture)
    holder.gates.append(reload_gate(host, port))  # the same rule for every reload
    bound, proxies, prefix = deploy_options(settings, shutdown_timeout, trusted_proxies, root_path)
    config = uvicorn.Config(
        behind(app, prefix),
        host=host,
        port=port,
        log_level=log_level,
        http=HEAD_LIMIT,  # a request's headers are bounded (`fim.server.head_limit`)
        timeout_graceful_shutdown=bound,  # type: ignore[arg-type]  # uvicorn: int, takes float
        forwarded_allow_ips=proxies,
        access_log=False,  # fim.server.http.AccessLog writes one line per request
        lifespan="off",
        # JSON logs: uvicorn's loggers propagate to the root's JSON handler
        log_config=None if json_logs else uvicorn.config.LOGGING_CONFIG,
    )
    server = _server_class()(config)
    api = app.state.api
    server.on_stop = lambda: begin(api, bound)
    # deferred: loading fim.masking costs tens of ms
    from fim.observe.logs import announce

    stop = asyncio.Event()
    hangup = None if git else reload_on_hangup(root, holder, stop, reload)  # SIGHUP: reload
    line, fields = banner_fields(snapshot, host, sock.getsockname()[1], reload, git)
    announce(line, **fields)
    watcher = (
        asyncio.create_task(_git_poll(git, holder, git_interval, stop))
        if git is not None
        else asyncio.create_task(watch(root, holder, stop=stop))
        if reload
        else None
    )
    spawn(_report_orphans(services))
    spawn(prune_store(services, holder, stop))
    signaller = asyncio.create_task(_signal_ready(server, ready)) if ready is not None else None
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        stop.set()
        for task in (signaller, hangup):
            if task is not None:
                task.cancel()
        if watcher is not None:
            watcher.cancel()
            try:
                await watcher
            except (asyncio.CancelledError, Exception):
                log.debug("watcher stopped")
        await settle(api)  # the records of runs the stop cut, written behind
        await services.aclose()
        if lock is not None:
            lock.close()


GC_YOUNG_THRESHOLD = 10_000
"""Net allocations of tracked objects between two young collections (CPython: 700). A
served run frees nearly everything it allocates by reference counting, yet at 700 the
collector ran ~90 times a second under load, ~5% of the server's CPU (0.11-0.12 ms a
run); at 10,000 it ran once in four seconds. What it still collects waits a little longer."""


def settle_heap() -> None:
    """For a long-running server, once everything is loaded: what is loaded now (modules,
    the snapshot) lives as long as the process, so it leaves the cyclic collector's
    generations (full collections stay short under load), and young collections run
    after GC_YOUNG_THRESHOLD allocations instead of 700. The JSON Schema validator a tool
    call's arguments may need is loaded first: no served call waits for it (newcomer-53 #13)."""
    # deferred: the tools' registry is a run's; the server has loaded it by now
    from fim.tools.registry import warm_up

    warm_up()
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


async def _git_poll(git: GitSource, holder: Any, interval: float, stop: asyncio.Event) -> None:
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.gitops import poll

    await poll(git, holder, interval=interval, stop=stop, on_hangup=True)  # SIGHUP: fetch now


HEAD_LIMIT = "fim.server.head_limit:BoundedHead"
"""uvicorn's `http=` protocol: its httptools one with each request's headers bounded
(`fim.server.head_limit`), named so a `--workers` child imports it itself."""


def listen_on(settings: Any, host: str | None, port: int | None) -> tuple[str, int, Any]:
    """The address `fim serve` listens on (flags over fim.yaml's `server.*`), checked
    against `refuse_open` and bound before anything starts (a port in use is one clear
    line): (host, the port bound, which `--port 0` leaves to the system, the socket)."""
    host = host or settings.host
    refuse_open(settings, host)
    sock = bind(host, settings.port if port is None else port)
    return host, sock.getsockname()[1], sock


def served(root: Path, state_url: str, host: str) -> Any:
    """The `Services` of the runs a server on `host` serves: another address than loopback
    is reached by others, so their runs keep no model call content unless fim.yaml asks
    (`fim.run.capture`)."""
    # deferred: as in `serve`, loaded with the app
    from fim.capabilities import CAPABILITIES
    from fim.run.services import Services

    return Services(root=root, state_url=state_url, providers=CAPABILITIES, local=is_loopback(host))


def refuse_open(settings: Any, host: str) -> None:
    """Fail closed: a server without keys answers whoever reaches it, so it listens only on
    a loopback address unless `server.allow_open` says a proxy in front authenticates (a
    `${VAR}` key whose variable is unset is an empty key, ignored: an open server)."""
    # deferred: the server's HTTP helpers, loaded with the app anyway
    from fim.server.http import server_keys

    if server_keys(settings) or settings.allow_open or is_loopback(host):
        return
    raise RunError(
        f"fim serve on {host} has no API key: anyone who reaches it could run every agent"
        " and workflow and decide every approval",
        hint="set server.api_keys in fim.yaml (a ${VAR} that is set), listen on 127.0.0.1,"
        " or set server.allow_open: true when a proxy in front authenticates",
    )


def bind(host: str, port: int) -> socket.socket:
    """`fim serve`'s listening socket (`fim.hosts.listen`)."""
    flag = f"fim serve --port {port + 1} or server.port in fim.yaml"
    return listen(host, port, flag=flag, backlog=2048)


def banner(snapshot: Any, host: str, port: int, reload: bool) -> str:
    """The start-up line: what is served, where, and whether file changes reload it."""
    return banner_fields(snapshot, host, port, reload)[0]


def banner_fields(
    snapshot: Any, host: str, port: int, reload: bool, git: GitSource | None = None
) -> tuple[str, dict[str, Any]]:
    """The start-up line and its fields (`project`, `url`, `auth`, ...), which a JSON log
    writes as a record of their own (`fim.observe.logs.announce`); the `commit` served
    (a git checkout's HEAD without `git`), with `git` its `ref` and `source` (credentials
    masked): which commit is live, from the first line (newcomer-52 #8)."""
    shown = f"[{host}]" if ":" in host else host
    agents, workflows = len(snapshot.agents), len(snapshot.workflows)
    # deferred: the HTTP helpers, the store's URL rules, fim's version (loaded with the
    # server anyway) and the checkout's HEAD (a file read)
    from fim.observe.vcs import served_commit
    from fim.server.http import server_keys
    from fim.store.engine import Database
    from fim.version import fim_version

    auth = bool(server_keys(snapshot.project.server))
    keys = "on" if auth else "off (no server.api_keys)"
    url = f"http://{shown}:{port}"
    # which store (password masked): replicas on separate SQLite files are separate brains
    store = Database(snapshot.project.state, root=snapshot.root).display_url
    line = (
        f"fim serve: project '{snapshot.project.name}' · {agents} agent{'s' * (agents != 1)}, "
        f"{workflows} workflow{'s' * (workflows != 1)} · {url} "
        f"(OpenAI-compatible: /v1) · reload {'on' if reload else 'off'} · auth {keys}"
        f" · store {store} · fim {fim_version()}"
    )
    commit, where = served_commit(snapshot), {"ref": git.ref, "source": git.shown} if git else {}
    served = ({"commit": commit} if commit else {}) | where
    line += "".join(f" · {key} {value}" for key, value in served.items())
    fields = {
        "project": snapshot.project.name,
        "url": url,
        "agents": agents,
        "workflows": workflows,
        "reload": reload,
        "auth": auth,
        "store": store,
        "fim_version": fim_version(),
        **served,
    }
    return line, fields


def deploy_options(
    settings: Any,
    shutdown_timeout: float | None,
    trusted_proxies: list[str] | None,
    root_path: str | None,
) -> tuple[float, list[str] | None, str]:
    """The shutdown bound, trusted proxies and path prefix: each flag of `fim serve` over
    fim.yaml's `server.*`."""
    return (
        settings.shutdown_timeout if shutdown_timeout is None else shutdown_timeout,
        settings.trusted_proxies if trusted_proxies is None else trusted_proxies,
        settings.root_path if root_path is None else root_path,
    )


def _server_class() -> type:
    # deferred: loading click costs tens of ms
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn re-raises the signal that stopped it; SIGTERM is the orchestrator's normal
        way to stop us, so a graceful shutdown after it exits 0 instead of dying by signal.
        `on_stop` runs as the stop begins (`fim.server.stopping.begin`)."""

        on_stop: Callable[[], None] | None = None

        async def shutdown(self, sockets: Any = None) -> None:
            if self.on_stop is not None:
                self.on_stop()
            await super().shutdown(sockets=sockets)

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if sig == signal.SIGTERM and sig in self._captured_signals:
                self._captured_signals.remove(sig)

    return Server


async def _signal_ready(server: Any, ready: asyncio.Event) -> None:
    while not server.started:
        await asyncio.sleep(0.01)
    ready.set()


async def _report_orphans(services: Any) -> None:
    """Warn about workflow runs a previous process left mid-node: they are not resumed
    automatically (a node may have had effects), but an operator should know."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.engine import orphaned_runs

    try:
        runs = await orphaned_runs(services)
    except Exception as exc:  # a warning that cannot be computed must not stop the server
        log.debug("could not list orphaned workflow runs: %s", exc)
        return
    for state in runs:
        log.warning(
            "workflow run %s (%s) was left running by a process that is gone; finish it with "
            "`fim workflow resume %s`",
            state.run_id,
            state.workflow,
            state.run_id,
        )


async def prune_store(services: Any, holder: Any, stop: asyncio.Event) -> None:
    """Keep the state store within fim.yaml's `retention:` while serving, ending the
    workflow runs whose human approval expired first (`fim.workflows.expiry`)."""
    # deferred: loading fim.store costs a few ms
    from fim.store import get_store
    from fim.store.retention import prune_periodically
    from fim.workflows.durable import queue_pruner
    from fim.workflows.expiry import expirer

    await prune_periodically(
        lambda: get_store(services),
        lambda: holder.current.project.retention,
        stop,
        transcripts=lambda: private.transcripts(holder.current.root),
        jobs=queue_pruner(get_store(services).url),  # the queue's finished jobs too
        expire=expirer(get_store(services)),  # runs whose human approval expired: ended
    )


def _on_swap(services: Any, old: Any, new: Any) -> None:
    """Stop MCP servers that were removed or changed; runs restart changed ones on demand."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.mcp.manager import SERVICE_KEY

    manager = services.cache.get(SERVICE_KEY)
    if manager is not None and old.project.mcp_servers != new.project.mcp_servers:
        spawn(manager.sync(dict(new.project.mcp_servers), new.root, mask=new.mask))
