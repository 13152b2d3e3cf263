"""Hot reload: watch the project, recompile in the background, swap the snapshot atomically.

The holder only ever points at a snapshot that compiled. A bad change leaves the last good
one serving and records the problems for `/v1/status` and the log; a run keeps the
snapshot object it started with, so a swap never changes a run in flight. The watcher
itself failing is recorded the same way, and it starts again: an operator who removes a
connector must not be told reload is on while edits go nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fim.build.commit_fields import reload_fields
from fim.build.hook_checks import unpinned_file
from fim.build.reload_health import summary, unavailable_agents
from fim.build.snapshot import Snapshot
from fim.errors import ConfigError, Problem
from fim.observe import record_reload
from fim.retries import Backoff

log = logging.getLogger("fim.build.reload")

_IGNORED_DIRS = {
    ".git",
    ".fim",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    ".venv",
    ".cassettes",
}


@dataclass
class SnapshotHolder:
    """The one mutable thing in a server: a reference to the current snapshot."""

    current: Snapshot
    errors: list[Problem] = field(default_factory=list)
    error_at: float | None = None
    reloads: int = 0
    listeners: list[Callable[[Snapshot, Snapshot], object]] = field(default_factory=list)
    gates: list[Callable[[Snapshot, Snapshot], list[Problem]]] = field(default_factory=list)
    """Rules a new snapshot must pass besides compiling, which the server that holds it
    registers (`fim serve`: a reload may not leave a server on a network address without
    keys, which it would refuse to start). Each is asked `gate(current, candidate)`. A
    snapshot a gate refuses is rejected like one that does not compile, before any of its
    Python is imported (`compile_project(gates=...)`): the old one keeps serving."""

    def refusals(self, new: Snapshot) -> list[Problem]:
        """What the gates say against swapping `new` in (nothing: it may be)."""
        return [problem for gate in self.gates for problem in gate(self.current, new)]

    def swap(self, new: Snapshot) -> None:
        old, self.current = self.current, new
        self.errors, self.error_at = [], None
        record_reload(True)
        self.reloads += 1
        for listener in self.listeners:
            listener(old, new)

    def fail(self, problems: list[Problem]) -> None:
        self.errors, self.error_at = problems, time.time()
        record_reload(False)


_OUTPUT_SUFFIXES = (".out", ".err", ".pid")


def _watch_filter(change: object, path: str) -> bool:
    """Whether a change can matter to the snapshot: not in an ignored folder, not an
    editor's swap or backup file (`unpinned_file`, which a hook's pinned folders leave out
    too), not a server's output (`fim serve > serve.out 2> serve.log` inside the project fed
    the watcher one change per line it wrote, each a compile). A hook's folder still pins
    an `.out` (a script may read one): changed there, the hook's calls are blocked until a
    reload, as for any file of it. A `.pyc` outside `__pycache__` is a change: a command
    hook's folders pin it (Python imports it as a module)."""
    parts = Path(path).parts
    if any(part in _IGNORED_DIRS for part in parts):
        return False
    name = parts[-1] if parts else ""
    return not (unpinned_file(name) or name.endswith(_OUTPUT_SUFFIXES))


async def reload_once(root: Path, holder: SnapshotHolder) -> bool:
    """Recompile `root` off the event loop; swap on success, keep the old one on failure."""
    # deferred: loading fim.config.loader costs tens of ms
    from fim.build.compile import compile_project
    from fim.build.vet import vet_in_child

    started = time.perf_counter()
    try:
        snapshot = await asyncio.to_thread(
            compile_project, root, vet=vet_in_child, gates=holder.refusals
        )
    except ConfigError as exc:
        holder.fail(exc.problems)
        for problem in exc.problems:
            log.warning("reload rejected, still serving %s: %s", holder.current.version, problem)
        return False
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise
    except BaseException as exc:  # a compiler bug (or a project module's) must not end the server
        holder.fail([Problem("fim.yaml", 1, 1, f"reload failed: {type(exc).__name__}: {exc}")])
        log.exception("reload failed, still serving %s", holder.current.version)
        return False
    same = snapshot.secrets == holder.current.secrets  # a rotated secret file: swapped in
    if snapshot.version == holder.current.version and not holder.errors and same:
        return False
    fields = reload_fields(snapshot, holder.current.version)  # as JSON fields (newcomer-52 #8)
    holder.swap(snapshot)
    took = (time.perf_counter() - started) * 1000
    unavailable = unavailable_agents(snapshot)
    if unavailable:  # it compiled, but a save broke agents: not a clean reload (newcomer-53 #5)
        said = summary(unavailable)
        log.warning(
            "reloaded snapshot %s in %.0f ms, %s", snapshot.version, took, said, extra=fields
        )
    else:
        log.info("reloaded snapshot %s in %.0f ms", snapshot.version, took, extra=fields)
    return True


def watched_folders(root: Path) -> list[Path]:
    """The project's own folders, each watched on its own (not recursively).

    A recursive watch (notify's) follows symlinked directories, and watchfiles cannot turn
    that off: a skill folder copied with `link -> /usr` put 15,721 inotify watches on /usr,
    and `link -> /` ended the watcher on a PermissionError under /proc. Walking the tree
    here without following links watches only what is inside the project; a link to a
    folder inside it is watched under the folder's own path. Ignored folders (.git, .fim,
    .venv ...) get no watches at all."""
    folders: list[Path] = []
    for base, dirnames, _files in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS)
        folders.append(Path(base))
    return folders


def _folders_changed(changes: Iterable[tuple[int, str]], folders: list[Path]) -> bool:
    """Whether a batch added a folder or deleted a watched one (a rename is both): only then
    is the tree walked again and the watches restarted (`watched_folders`); a file's edit
    costs no walk of the project."""
    watched = {str(folder) for folder in folders}
    for kind, path in changes:
        if (kind == _DELETED and path in watched) or (kind == _ADDED and os.path.isdir(path)):
            return True
    return False


_ADDED, _DELETED = 1, 3
"""watchfiles' `Change.added` and `Change.deleted` (its enum is an int)."""


def _watcher_problem(root: Path, exc: Exception, retry_s: float) -> Problem:
    """The failure as a problem for `/v1/status`, at the file it names when there is one."""
    where = "."
    filename = getattr(exc, "filename", None)
    if isinstance(filename, str) and filename:
        path = Path(filename)
        where = path.relative_to(root).as_posix() if path.is_relative_to(root) else filename
    return Problem(
        where,
        1,
        1,
        f"hot reload stopped: {type(exc).__name__}: {exc}",
        f"edits are not applied until the watcher restarts, in {retry_s:g} s",
    )


async def _pause(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def watch(
    root: Path,
    holder: SnapshotHolder,
    *,
    debounce_ms: int = 20,
    step_ms: int = 5,
    stop: asyncio.Event | None = None,
    retry_s: float = 1.0,
    max_retry_s: float = 60.0,
) -> None:
    """Reload on every (debounced) batch of file changes until `stop` is set.

    watchfiles yields a batch once `step_ms` passes without a new change (at most
    `debounce_ms` after the first), so a save is seen 1-2 steps after it lands: 5 ms
    steps answer a save in ~8 ms where 10 ms steps took ~17, for ~1 ms of CPU a second
    more while idle.

    The watcher never ends on its own: an exception (an unreadable folder, the inotify
    limit) is logged and recorded on the holder (`/v1/status`' `last_reload_error`, the dev
    page), and the watcher starts again after `retry_s`, doubling up to `max_retry_s`. A
    folder created or removed starts it again at once on the new set of folders
    (`watched_folders`). After the start and any restart the project is recompiled once the
    watches stand (the first yield, a change or the 1 s timeout), so an edit made while no
    watch was there is not lost: a `fim serve` worker answered requests before its watches
    stood, and an edit in that window was never applied (seen with `--workers 2`)."""
    # deferred: loading watchfiles costs a few ms
    from watchfiles import awatch

    # watchfiles logs "N changes detected" at INFO for every batch: with the server's log
    # written to a file inside the project, each such line was a change, forever
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    backoff = Backoff(attempts=0, first=retry_s, cap=max_retry_s)  # `attempts`: unbounded
    failed = 0
    catch_up = True  # the first watches too: a server answers before they stand
    while stop is None or not stop.is_set():
        target = os.path.realpath(root)  # a symlinked root (git-sync) is followed: see below
        folders = await asyncio.to_thread(watched_folders, root)
        try:
            batches = awatch(
                *folders,
                watch_filter=_watch_filter,
                debounce=debounce_ms,
                step=step_ms,
                stop_event=stop,
                recursive=False,
                ignore_permission_denied=True,
                rust_timeout=1000,
                yield_on_timeout=True,
            )
            async with contextlib.aclosing(batches):  # a restart drops the old watches now
                async for changes in batches:
                    failed = 0  # it runs: the next failure starts the backoff over
                    if os.path.realpath(root) != target:  # the link flipped: watch, load there
                        log.info("%s now points at %s", root, os.path.realpath(root))
                        catch_up = True
                        break
                    if changes or catch_up:
                        catch_up = False
                        await reload_once(root, holder)
                    if _folders_changed(changes, folders):
                        catch_up = True
                        break
                else:
                    return  # `stop` was set
        except Exception as exc:
            failed += 1
            delay = backoff.delay(failed)
            holder.fail([_watcher_problem(root, exc, delay)])
            log.error(
                "hot reload stopped, restarting in %g s: %s: %s",
                delay,
                type(exc).__name__,
                exc,
                exc_info=not isinstance(exc, OSError),
            )
            await _pause(delay, stop)
            catch_up = True


def reload_on_hangup(
    root: Path, holder: SnapshotHolder, stop: asyncio.Event, reload: bool
) -> asyncio.Task[None] | None:
    """SIGHUP to `fim serve -p` or `fim worker -p`: recompile the project now (with
    `--no-reload`, a line saying nothing changes), as `--git` fetches now and `--workers`
    restarts its workers. Unhandled, SIGHUP's default killed the process at once: a run in
    flight left no record and no usage row, and a closed terminal or an operator's "log
    rotation" HUP stopped the server (attack-63 F2). The handler is installed before this
    returns (a HUP right after the start banner is handled); the task answers it until
    `stop` is set. None when the loop is not the main thread's (an embedded server)."""
    wake = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, wake.set)
    except (ValueError, RuntimeError, AttributeError):  # not the main thread, or no SIGHUP
        return None
    return loop.create_task(_answer_hangups(root, holder, stop, reload, wake))


async def _answer_hangups(
    root: Path, holder: SnapshotHolder, stop: asyncio.Event, reload: bool, wake: asyncio.Event
) -> None:
    try:
        while not stop.is_set():
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            if stop.is_set():
                return
            wake.clear()
            if not reload:
                log.info("SIGHUP: --no-reload: still serving %s", holder.current.version)
                continue
            log.info("SIGHUP: reloading %s now", root)
            await reload_once(root, holder)
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
