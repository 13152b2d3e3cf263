"""`fim serve --workers N`: N processes accepting on one port (issue 25.2).

uvicorn's own supervisor (`uvicorn.supervisors.Multiprocess`) does the process work: the
parent binds the socket once, spawns N children that accept on it, health-checks them,
replaces one that dies and forwards SIGTERM for a graceful stop. fim adds only what each
child needs at start (`worker_app`, an app factory uvicorn calls in the child): its own
compiled snapshot, its own file watcher (hot reload happens in every worker, each from the
files), and a lifespan that stops both. A worker's start judges the disk as a reload does
(`start_snapshot`); one it refuses exits, and the supervisor starts it again later
(`supervisor`), while the other workers keep serving their snapshot. Every worker uses the
state store the parent checked at start (`state:` takes effect at a restart), and with
`--no-reload` serves only the project the parent compiled: a worker started on another
one refuses it.

The workers share state only through the store, so N > 1 needs PostgreSQL: runs,
sessions, approvals (a tool call waiting on worker 1 sees a decision posted to worker 2)
and the live event streams (LISTEN/NOTIFY, `fim.store.live`) then work across them.
SQLite is one process; `--workers 2` on it is refused with the reason, before binding.

`/metrics` answers for all the workers, whichever one takes the scrape: the parent gives
them a private folder (`PROMETHEUS_MULTIPROC_DIR`, prometheus_client's multiprocess mode)
where each writes its counters, and the scrape sums them (`fim.observe.metrics`). Without
it a scrape read one random worker's counters, which went backwards between scrapes (a
counter reset to Prometheus: `rate()` wrong, alerts at random). The parent forgets the
live gauges of a worker that is gone (`mark_process_dead`); its counters stay in the sum.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from fim import observe
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, watch
from fim.build.snapshot import Snapshot
from fim.build.vet import VET_TIMEOUT_S, fingerprint, vet_in_child
from fim.environ import hide_from_children
from fim.errors import ConfigError, Problem, RunError
from fim.events import build_validators
from fim.hooks.command_output import build_validators as build_hook_validators
from fim.llm import preload
from fim.masking.keys import masked_url
from fim.observe.logs import announce, configure
from fim.retries import Backoff
from fim.server import (
    HEAD_LIMIT,
    _on_swap,
    banner_fields,
    deploy_options,
    listen_on,
    prune_store,
    served,
    settle_heap,
    uvicorn_loop,
)
from fim.server.app import create_app, reload_gate
from fim.server.proxy import behind
from fim.server.stopping import on_signals, settle
from fim.stdout_guard import guarded
from fim.store.health import check_at_start
from fim.store.schema import normalize_url
from fim.tools.isolate_helpers import start_tracker_clean

ENV = "FIM_SERVE_WORKER"
"""The options of one worker, as JSON, handed from the parent to the spawned children."""

REFUSED = 78
"""A worker's exit status when its start refuses the project on disk (sysexits' EX_CONFIG).
Not uvicorn's STARTUP_FAILURE (3): on that its supervisor stops every worker."""

RETRY_REFUSED = Backoff(attempts=0, first=1.0, cap=60.0)
"""When the supervisor starts a worker again after a refused start: 1 s, 2 s ... 60 s (a
start costs an interpreter and a compile). The count starts over after a quiet 2 minutes."""

READY_S = int(2 * VET_TIMEOUT_S)
"""How long SIGHUP's restart waits for each new worker to be ready before it keeps the old
one and stops (uvicorn's `timeout_worker_healthcheck`, 5 s by default). A new worker on a
disk other than the start's compiles the project twice: in the `python -I` child (up to
`VET_TIMEOUT_S`), then itself; with a module that imports slowly (pandas), 5 s aborted
every restart, log rotation's included (attack-47 F3). Only the restart waits this long:
the pings that find a hung worker keep uvicorn's 5 s."""

log = logging.getLogger("fim.server")


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
    shutdown_timeout: float | None = None,
    trusted_proxies: list[str] | None = None,
    root_path: str | None = None,
) -> None:
    """Compile once to report config errors and check the store, bind, then let uvicorn
    run `workers` children until SIGTERM/SIGINT (each child stops like `fim serve`)."""
    # deferred: a third-party package, loaded only when this path runs
    import uvicorn

    # deferred: a third-party package, loaded only when this path runs
    from uvicorn.supervisors import Multiprocess

    snapshot = compile_project(root)
    require_shared_store(snapshot.project.state, root, workers)
    check_at_start(snapshot.project.state, root)  # one line, not a 500 on every run
    settings = snapshot.project.server
    host, port, sock = listen_on(settings, host, port)  # `--port 0`: one for every worker
    bound, proxies, prefix = deploy_options(settings, shutdown_timeout, trusted_proxies, root_path)
    options = {
        "root": str(root),
        "reload": reload,
        "log_level": log_level,
        "json": json_logs,
        "shutdown_timeout": bound,
        "root_path": prefix,
    }
    options |= {"host": host, "port": port}  # each worker's reloads keep the start's rule
    options["accepted"] = fingerprint(snapshot)  # what a worker may start on unchecked
    options["state"] = snapshot.project.state  # the store checked here: every worker's
    os.environ[ENV] = json.dumps(options)
    log_config: dict[str, Any] = {"log_config": None} if json_logs else {}
    config = uvicorn.Config(
        "fim.server.workers:worker_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        http=HEAD_LIMIT,  # a request's headers are bounded (`fim.server.head_limit`)
        timeout_graceful_shutdown=bound,  # type: ignore[arg-type]  # uvicorn: int, takes float
        forwarded_allow_ips=proxies,
        access_log=False,
        lifespan="on",
        loop=uvicorn_loop(),
        **log_config,
    )
    line, fields = banner_fields(snapshot, host, sock.getsockname()[1], reload)
    announce(f"{line} · {workers} workers", **fields, workers=workers)
    # The children are spawned with this process's whole environment (they need it, and
    # hide it at once: `worker_app`); the resource tracker spawning starts must not hold it.
    start_tracker_clean()
    metrics = shared_metrics_folder() if find_spec("prometheus_client") else None
    try:
        supervisor(Multiprocess, metrics)(config, sockets=[sock]).run()
    finally:
        sock.close()
        if metrics is not None:
            os.environ.pop(METRICS_ENV, None)
            shutil.rmtree(metrics, ignore_errors=True)


METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess mode: the folder each worker writes its metrics to."""


def shared_metrics_folder() -> str:
    """A new private folder (0700: metric labels name agents and tools) for the workers'
    metrics, in the environment they are spawned with. Never one given from outside:
    files left by another server would be summed into this one's counters."""
    folder = tempfile.mkdtemp(prefix="fim-metrics-")
    os.chmod(folder, 0o700)
    os.environ[METRICS_ENV] = folder
    return folder


def supervisor(
    base: type, metrics: str | None, clock: Callable[[], float] = time.monotonic
) -> type:
    """uvicorn's `Multiprocess`, with a worker whose start was refused (`REFUSED`: the
    project on disk is one a reload rejected) started again only after `RETRY_REFUSED`,
    not at once in a loop; the other workers serve meanwhile, and each refusal says how
    many do. With none left, the port still accepts connections (the parent holds the
    socket) but no one answers them, `/readyz` included: an error line at each refusal
    says so (attack-47 F10), until a worker starts on a project it accepts. SIGHUP waits
    `READY_S` for each new worker. With `metrics`, it tells prometheus_client when a
    worker is gone (it died and was replaced, was restarted by SIGHUP, or stopped): its
    live gauges (runs in progress) leave the sum."""

    def forget(pid: int) -> None:
        if metrics is None:
            return
        # deferred: a third-party package, loaded only when this path runs
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, metrics)  # type: ignore[no-untyped-call]

    class Supervisor(base):  # type: ignore[misc]  # a class given at run time
        processes: list[Any]

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.refused: dict[int, float] = {}
            """A worker that refused to start, by pid: when it may be replaced."""
            self.refusals, self.last_refusal = 0, -1e9

        def _pids(self) -> set[int]:
            return {p.pid for p in self.processes if p.pid is not None}

        def _forget(self, before: set[int]) -> None:
            for pid in before - self._pids():
                forget(pid)

        def _held(self) -> list[Any]:
            """The workers that refused to start and wait to be replaced: each refusal in a
            row waits longer (`RETRY_REFUSED`)."""
            now, pids = clock(), self._pids()
            self.refused = {pid: at for pid, at in self.refused.items() if pid in pids}
            for p in self.processes:
                if p.pid is None or p.pid in self.refused or p.exitcode != REFUSED:
                    continue
                in_a_row = now - self.last_refusal < 2 * (RETRY_REFUSED.cap or 0)
                self.refusals = self.refusals + 1 if in_a_row else 1
                self.last_refusal = now
                self.refused[p.pid] = now + RETRY_REFUSED.delay(self.refusals)
                self._report(p.pid, RETRY_REFUSED.delay(self.refusals))
            return [p for p in self.processes if now < self.refused.get(p.pid or 0, 0)]

        def _report(self, pid: int, wait: float) -> None:
            running = sum(1 for p in self.processes if p.exitcode is None)
            if running:
                log.info("fim serve: worker [%d] is replaced in %g s; %d other worker(s) "
                         "serving meanwhile", pid, wait, running)  # fmt: skip
                return
            log.error(
                "fim serve: no worker is serving: worker [%d] refused the project on disk and "
                "no other worker is running; connections are accepted but wait unanswered "
                "(/healthz and /readyz too: readiness fails) until a worker starts on a "
                "project it accepts; the next start is in %g s",
                pid,
                wait,
            )

        def restart_all(self) -> None:
            ping = self.config.timeout_worker_healthcheck
            self.config.timeout_worker_healthcheck = READY_S  # the wait for each new worker
            try:
                super().restart_all()
            finally:
                self.config.timeout_worker_healthcheck = ping

        def keep_subprocess_alive(self) -> None:
            before, held, every = self._pids(), self._held(), self.processes
            self.processes = [p for p in every if p not in held]
            watched = list(self.processes)
            try:
                super().keep_subprocess_alive()  # replaces the others in place, if need be
                for i, (old, new) in enumerate(zip(watched, self.processes, strict=True)):
                    if new is not old and old.exitcode == REFUSED and old.pid not in self.refused:
                        new.kill()  # refused during its ping and replaced at once: held
                        new.join()
                        self.processes[i] = old
            finally:
                replaced = iter(self.processes)
                self.processes = [p if p in held else next(replaced) for p in every]
            self._forget(before)

        def handle_signals(self) -> None:
            before = self._pids()
            super().handle_signals()
            self._forget(before)

        def join_all(self) -> None:
            super().join_all()
            for pid in self._pids():
                forget(pid)

    return Supervisor


def start_snapshot(root: Path, options: dict[str, Any]) -> Snapshot:
    """A worker's own compile of the disk, judged as the start and every reload are: the
    rule `fim serve` starts by (`reload_gate`: no network address without keys), and its
    Python checked in a child process first (`vet_in_child`) unless it is what the parent
    compiled at start (`accepted`). A worker started later (one that died and was
    replaced, SIGHUP, SIGTTIN) compiled the disk unjudged and served a project every
    running worker had rejected, without keys (attack-46 F1). With `--no-reload`, the
    start's project only (attack-47 F2). Refused: one line, and it exits (`REFUSED`)."""
    gate = reload_gate(options["host"], options["port"])

    def gates(new: Snapshot) -> list[Problem]:
        if not options.get("reload", True) and fingerprint(new) != options["accepted"]:
            why = ("the project on disk is not the one fim serve compiled at start, and with "
                   "--no-reload every worker serves that one only")  # fmt: skip
            return [
                Problem("fim.yaml", 1, 1, why, "restart fim serve to serve the project on disk")
            ]
        return gate(new, new)

    def vet(candidate: Snapshot) -> list[Problem]:
        if fingerprint(candidate) == options["accepted"]:
            return []  # its Python ran in the parent at start already
        return vet_in_child(candidate)

    try:
        snapshot = compile_project(root, vet=vet, gates=gates)
    except ConfigError as exc:
        more = len(exc.problems) - 1
        log.error(
            "fim serve worker [%d] refused the project on disk and exits: %s%s",
            os.getpid(),
            exc.problems[0] if exc.problems else "no snapshot",
            f" (and {more} more)" if more > 0 else "",
        )
        sys.exit(REFUSED)
    if "state" in options:  # the parent's: a `state:` edited since is only noted
        store_kept(options["state"])(snapshot, snapshot)
    return snapshot


def store_kept(url: str) -> Callable[[Snapshot, Snapshot], list[Problem]]:
    """A gate that refuses nothing: a worker's store is the parent's (`url`, checked at
    start: PostgreSQL, reachable), whatever `state:` says now. A replaced worker opened
    the `state:` of the disk and split the fleet across two stores: runs found on one
    worker and not the other, approvals and budgets apart (attack-47 F2). A `state:` that
    differs is logged once per change, as `server.host` is."""

    def gate(current: Snapshot, new: Snapshot) -> list[Problem]:
        state = new.project.state
        if state != url and (state != current.project.state or current is new):
            log.warning(
                "state: in fim.yaml is %s; fim serve keeps using %s until it is restarted",
                masked_url(state),
                masked_url(url),
            )
        return []

    return gate


def worker_app() -> Any:
    """In a spawned child: compile the project (`start_snapshot`: or exit), build the app
    with a lifespan that runs this worker's watcher and closes its services."""
    hide_from_children()  # spawned: its block holds the parent's variables again
    options = json.loads(os.environ[ENV])
    configure(options["log_level"], "json" if options["json"] else "text")
    guarded("worker").__enter__()  # its lifetime, as `fim serve`'s: a tool's prints logged
    root = Path(options["root"])
    snapshot = start_snapshot(root, options)
    build_validators()
    build_hook_validators()
    holder = SnapshotHolder(snapshot)
    services = served(root, options["state"], options["host"])
    holder.listeners.append(lambda old, new: _on_swap(services, old, new))
    holder.gates += [reload_gate(options["host"], options["port"]), store_kept(options["state"])]
    app = create_app(holder, services)
    observe.warm(snapshot.project.name)
    settle_heap()
    preload(snapshot.models_in_use())
    api = app.state.api
    api.one_of_many = True  # /mcp keeps no sessions: the kernel picks a worker per request

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        on_signals(api, options["shutdown_timeout"])  # uvicorn's handlers are in place now
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
            await settle(api)  # the records of runs the stop cut, written behind
            await services.aclose()

    app.router.lifespan_context = lifespan
    return behind(app, options["root_path"])
