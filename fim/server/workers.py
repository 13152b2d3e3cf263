"""`fim serve --workers N`: N processes accepting on one port (issue 25.2).

uvicorn's own supervisor (`uvicorn.supervisors.Multiprocess`) does the process work: the
parent binds the socket once, spawns N children that accept on it, health-checks them,
replaces one that dies and forwards SIGTERM for a graceful stop. fim adds only what each
child needs at start (`worker_app`, an app factory uvicorn calls in the child): its own
compiled snapshot, its own file watcher (hot reload happens in every worker, each from the
files), and a lifespan that stops both.

The workers share state only through the store, so N > 1 needs PostgreSQL: runs,
sessions, approvals (a tool call waiting on worker 1 sees a decision posted to worker 2)
and the live event streams (LISTEN/NOTIFY, `fim.store.live`) then work across them.
SQLite is one process; `--workers 2` on it is refused with the reason, before binding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fim import observe
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, watch
from fim.capabilities import CAPABILITIES
from fim.environ import hide_from_children
from fim.errors import RunError
from fim.events import build_validators
from fim.hooks.command_output import build_validators as build_hook_validators
from fim.llm import preload
from fim.observe.logs import announce, configure
from fim.run.services import Services
from fim.server import (
    _on_swap,
    banner_fields,
    bind,
    prune_store,
    refuse_open,
    settle_heap,
    uvicorn_loop,
)
from fim.server.app import create_app
from fim.store.schema import normalize_url
from fim.tools.isolate_helpers import start_tracker_clean

ENV = "FIM_SERVE_WORKER"
"""The options of one worker, as JSON, handed from the parent to the spawned children."""


def require_shared_store(state_url: str, root: Path, workers: int) -> None:
    """Refuse N > 1 on a store the workers cannot share (SQLite)."""

    if workers > 1 and not normalize_url(state_url, root).startswith("postgresql"):
        raise RunError(
            f"fim serve --workers {workers} needs a PostgreSQL state store; this project's "
            f"`state:` is SQLite, which serves one process",
            hint="set `state: postgresql://...` in fim.yaml (runs, approvals and live event "
            "streams are then shared by the workers), or run with --workers 1",
        )


def serve_workers(
    root: Path,
    *,
    workers: int,
    host: str | None = None,
    port: int | None = None,
    reload: bool = True,
    log_level: str = "info",
    json_logs: bool = False,
) -> None:
    """Compile once to report config errors and check the store, bind, then let uvicorn
    run `workers` children until SIGTERM/SIGINT."""
    # deferred: a third-party package, loaded only when this path runs
    import uvicorn

    # deferred: a third-party package, loaded only when this path runs
    from uvicorn.supervisors import Multiprocess

    snapshot = compile_project(root)
    require_shared_store(snapshot.project.state, root, workers)
    settings = snapshot.project.server
    host, port = host or settings.host, port or settings.port
    refuse_open(settings, host)
    sock = bind(host, port)
    options = {"root": str(root), "reload": reload, "log_level": log_level, "json": json_logs}
    os.environ[ENV] = json.dumps(options)
    logging: dict[str, Any] = {"log_config": None} if json_logs else {}
    config = uvicorn.Config(
        "fim.server.workers:worker_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=30,
        access_log=False,
        lifespan="on",
        loop=uvicorn_loop(),
        **logging,
    )
    line, fields = banner_fields(snapshot, host, sock.getsockname()[1], reload)
    announce(f"{line} · {workers} workers", **fields, workers=workers)
    # The children are spawned with this process's whole environment (they need it, and
    # hide it at once: `worker_app`); the resource tracker spawning starts must not hold it.
    start_tracker_clean()
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()


def worker_app() -> Any:
    """In a spawned child: compile the project, build the app with a lifespan that runs
    this worker's watcher and closes its services."""
    hide_from_children()  # spawned: its block holds the parent's variables again
    options = json.loads(os.environ[ENV])
    configure(options["log_level"], "json" if options["json"] else "text")
    root = Path(options["root"])
    snapshot = compile_project(root)
    build_validators()
    build_hook_validators()
    holder = SnapshotHolder(snapshot)
    services = Services(root=root, state_url=snapshot.project.state, providers=CAPABILITIES)
    holder.listeners.append(lambda old, new: _on_swap(services, old, new))
    app = create_app(holder, services)
    observe.warm(snapshot.project.name)
    settle_heap()
    preload(snapshot.models_in_use())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(root, holder, stop=stop)) if options["reload"] else None
        pruner = asyncio.create_task(prune_store(services, holder, stop))
        try:
            yield
        finally:
            stop.set()
            await pruner
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
            await services.aclose()

    app.router.lifespan_context = lifespan
    return app
