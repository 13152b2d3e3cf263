"""Run untrusted work (model-written templates, expressions, patterns) in a killable worker.

A thread cannot be stopped: a Jinja template computing `9**(9**8)` or a regex backtracking
on `^(a+)+$` keeps its thread (and the GIL) until it finishes, whatever deadline the caller
set. So the builtins that evaluate model-written code call `run()`, which hands the work to
a pool of worker processes (pebble's ProcessPool: a task past its timeout has its worker
killed and replaced). Each worker runs with:

- a wall-clock deadline per call (the caller's `timeout`), enforced by killing the worker;
- `RLIMIT_CPU` per call (deadline + 1 s) as a backstop should the deadline not fire;
- `RLIMIT_AS` (address space) so a huge allocation is a MemoryError, not a host OOM
  (`MEMORY_BYTES` for a call, unless it asks for more, up to `MEMORY_CEILING`: a
  database connector's SQLite statement needs SQLite's heap on top);
- a cap on the size of what it returns (`MAX_RESULT` characters);
- a lower CPU priority (nice 10), so spinning workers cannot slow the server's event loop;
- an empty environment (no API keys within reach of the evaluated text).

Database connectors' statements run in a pool of their own (`DATABASE`, `call(...,
workers=DATABASE)`): they mostly wait on a database, and must not hold the workers the
tools need. Each pool is created on first use (agents that never call these tools pay
nothing), from one `forkserver` that pre-imports the tool modules (no fork of the
multi-threaded server; a replacement worker is one cheap fork of a small process). Like
every multiprocessing child, a worker imports the main module (`fim`'s console script:
cheap); scripts that call these tools need the usual `if __name__ == "__main__":` guard.
Calls beyond the pool size queue; nothing here uses the event loop's thread pool after the
pool has started, so a hostile call cannot starve database access, the reload watcher or
other runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from fim.environ import hide_initial_environment, not_dumpable
from fim.locks import share, slots
from fim.schema_check import MAX_NESTING, nested_deeper, plainly_valid, problems_json
from fim.startup_cost import one_off
from fim.types import ToolResult

# Eight workers (~6 MB private memory each): six hostile calls in flight still leave two
# for everyone else; they are niced, so more workers than cores costs the server little.
WORKERS = 8
DATABASE_WORKERS = 4
"""Workers for database statements (~25 MB private memory each once a driver is loaded);
statements past them queue."""
MEMORY_BYTES = 256 * 1024 * 1024  # address space per worker, per call unless it asks more
MEMORY_CEILING = 1024 * 1024 * 1024
"""The most address space any call may ask for (`call(memory=...)`): the hard limit."""
MAX_RESULT = 200_000
NICE = 10
DEFAULT_TIMEOUT = 5.0
CHECK_SECONDS = 2.0
"""How long checking one value against a third party's JSON Schema may take."""
PARTY_SLOTS = 2
"""Workers one third party's checks may hold at once (`schema_problems`)."""

PRELOAD = [
    "fim.tools.isolate_helpers",  # first: not dumpable where its sitecustomize did not run
    "jinja2.sandbox",
    "jsonschema",
    "fim.schema_check",
    "fim.tools.isolate",
    "fim.tools.builtin.calculator",
    "fim.tools.builtin.json_transform",
    "fim.tools.builtin.template_render",
    "fim.tools.builtin.text_utils",
    "fim.tools.builtin._html",
]

T = TypeVar("T")


def _init_worker(memory_bytes: int, nice: int, ceiling: int = MEMORY_CEILING) -> None:
    """Worker start-up: limits, priority, and a SIGTERM that kills even inside C code.

    The address-space limit is `memory_bytes`; a call may raise it for itself up to
    `ceiling` (the hard limit, which nothing in the worker can raise)."""

    # pebble's worker turns SIGTERM into a Python handler, which cannot run while C code
    # (a big-int power, a regex match) holds the interpreter: die at once instead.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ.clear()  # templates and patterns need no API keys; keep them out of reach
    hide_initial_environment(keep=False)
    not_dumpable()  # a fresh process: dumpable again, and it holds connection passwords
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, max(memory_bytes, ceiling)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(OSError):
        os.nice(nice)


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _execute(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    cpu: int,
    memory: int = MEMORY_BYTES,
    raw: bool = False,
) -> Any:
    """Inside the worker: cap CPU time and memory for this call, run `fn`, cap what comes
    back (`raw`: what `fn` returns or raises, as it is)."""

    # RLIMIT_CPU counts the process's whole life and workers are reused: allow `cpu`
    # more seconds from now (SIGXCPU kills the worker past it).
    soft = int(_cpu_used()) + 1 + cpu
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    _, ceiling = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (min(memory, ceiling), ceiling))
    if raw:
        return fn(*args, **kwargs)
    try:
        result = fn(*args, **kwargs)
    except MemoryError:
        return ToolResult(
            content=f"Error: the work needed more than {MEMORY_BYTES // 2**20} MB of memory "
            "and was stopped. Work on less data.",
            is_error=True,
        )
    except RecursionError:
        return ToolResult(
            content="Error: the input is nested too deeply. Flatten it or send less data.",
            is_error=True,
        )
    text = result.content if isinstance(result, ToolResult) else result
    if isinstance(text, str) and len(text) > MAX_RESULT:
        return ToolResult(
            content=f"Error: the result is longer than {MAX_RESULT} characters. "
            "Ask for less output.",
            is_error=True,
        )
    return result


def _warm() -> None:
    """A no-op task: scheduling it starts the pool (forkserver, workers) in this thread."""


class Workers:
    """One pool of killable workers, started on first use; a broken one (a manager thread
    died) is stopped and replaced. Two exist: the tools' (`TOOLS`) and the database
    statements' (`DATABASE`), so statements waiting on a database never hold the workers a
    calculator needs, and only the database's workers load its drivers."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self._lock = threading.Lock()
        self._pool: Any = None

    def _new_pool(self) -> Any:
        # deferred: loading multiprocessing and pebble costs every start-up a few ms
        import multiprocessing

        from pebble import ProcessPool

        # deferred: only a pool needs the launcher (and its module loads with the pool)
        from fim.tools.isolate_helpers import use_launcher

        use_launcher()  # the forkserver and the resource tracker: without fim's environment
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)  # one forkserver for both pools
        pool = ProcessPool(
            max_workers=self.size,
            initializer=_init_worker,
            initargs=(MEMORY_BYTES, NICE),
            context=context,
        )
        # Starting the pool spawns the forkserver and the workers; do it here, off the
        # event loop, rather than inside the first schedule() call.
        pool.schedule(_warm).result(timeout=60)
        return pool

    def ensure(self) -> Any:
        """The running pool (blocking: it may start it)."""
        with self._lock:
            if self._pool is not None and not self._pool.active:
                broken, self._pool = self._pool, None
                broken.stop()
                with contextlib.suppress(Exception):
                    broken.join(timeout=10)
            if self._pool is None:
                self._pool = self._new_pool()
            return self._pool

    async def started(self) -> Any:
        """The running pool, started in a thread on first use (a one-off 0.2-0.5 s)."""
        current = self._pool
        if current is not None and current.active:
            return current
        with one_off():  # the call that waits reports it as start-up, not its own time
            return await asyncio.to_thread(self.ensure)

    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and diagnostics)."""
        current = self._pool
        if current is None:
            return []
        return sorted(current._pool_manager.worker_manager.workers)

    def shutdown(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.stop()
                self._pool.join(timeout=10)
                self._pool = None


TOOLS = Workers("isolate", WORKERS)
DATABASE = Workers("isolate-db", DATABASE_WORKERS)


async def pool() -> Any:
    """The tools' pool, started on first use in a worker thread (a one-off 0.2-0.5 s)."""
    return await TOOLS.started()


def worker_pids() -> list[int]:
    """Process ids of the tools' live workers (for tests and diagnostics)."""
    return TOOLS.pids()


def shutdown() -> None:
    """Stop both pools and their workers (they are also stopped at interpreter exit)."""
    TOOLS.shutdown()
    DATABASE.shutdown()


async def run(
    fn: Callable[..., str | ToolResult],
    *args: Any,
    timeout: float = DEFAULT_TIMEOUT,
    hint: str = "Simplify it.",
    **kwargs: Any,
) -> str | ToolResult:
    """Run `fn(*args, **kwargs)` in a worker; a module-level function returning the tool's
    observation. Past `timeout` seconds the worker is killed and an error observation comes
    back; cancelling the awaiting task kills the worker too. One API key's calls hold at
    most half the workers (`fim.locks.share`): its hostile calls wait for each other, not
    the other keys' calculators."""
    async with share("isolate", WORKERS):
        return await _scheduled(fn, args, kwargs, timeout, hint)


async def call(
    fn: Callable[..., T],
    *args: Any,
    timeout: float,
    memory: int = MEMORY_BYTES,
    workers: Workers | None = None,
    **kwargs: Any,
) -> T:
    """`fn(*args, **kwargs)` in a worker of `workers` (the tools' by default), with `memory`
    bytes of address space (at most `MEMORY_CEILING`): what it returns comes back and what
    it raises is raised here, as they are (both must pickle). A worker that had to be killed
    (past `timeout`, or by a resource limit) raises `Stopped`; cancelling the awaiting task
    kills the worker too. One API key holds at most half of a pool's workers."""
    chosen = workers or TOOLS
    async with share(chosen.name, chosen.size):
        result: T = await _submit(fn, args, kwargs, timeout, memory, True, chosen)
        return result


class Stopped(Exception):
    """The worker running a call was killed: past its time limit (`timed_out`), or by a
    resource limit (CPU time; memory past what a MemoryError could report)."""

    def __init__(self, message: str, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


async def _scheduled(
    fn: Callable[..., str | ToolResult],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: float,
    hint: str,
) -> str | ToolResult:
    try:
        result: str | ToolResult = await _submit(
            fn, args, kwargs, timeout, MEMORY_BYTES, False, TOOLS
        )
    except Stopped as exc:
        return ToolResult(content=f"Error: {exc}. {hint}", is_error=True)
    return result


async def _submit(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: float,
    memory: int,
    raw: bool,
    workers: Workers,
) -> Any:
    job = (fn, args, kwargs, int(timeout) + 1, memory, raw)
    pool = await workers.started()  # loads pebble, off the loop, the first time
    # deferred: loading pebble costs a few ms
    from pebble import ProcessExpired

    try:
        future = pool.schedule(_execute, args=job, timeout=timeout)
    except RuntimeError:  # the pool broke between the check and the call: replace it
        pool = await asyncio.to_thread(workers.ensure)
        future = pool.schedule(_execute, args=job, timeout=timeout)
    try:
        return await asyncio.wrap_future(future)
    except FutureTimeout as exc:
        if type(exc) is not FutureTimeout:  # the work's own (a subclass): not the deadline
            raise
        raise Stopped(f"stopped after {timeout:g}s (the time limit)", True) from None
    except ProcessExpired as exc:
        raise Stopped(
            "the work was stopped by a resource limit (CPU time or memory; "
            f"exit code {exc.exitcode})",
            False,
        ) from None
    except asyncio.CancelledError:
        future.cancel()  # pebble kills the worker running a cancelled task
        raise


async def schema_problems(
    value: Any, schema: Mapping[str, Any], *, whose: str, party: str
) -> list[str]:
    """`fim.schema_check.problems(value, schema)` for a schema a third party wrote (an MCP
    server's tool: its input or its output), checked in a worker killed past
    `CHECK_SECONDS`. A few kilobytes of `$ref`'d `anyOf` keep a validator busy for hours;
    on the event loop that would stop every run of the server. A flat schema a value
    plainly satisfies needs no worker (most tools' arguments). One `party` (a server)
    has at most `PARTY_SLOTS` of the workers at a time: a hostile server's calls wait for
    each other, not everyone's calculator."""
    if plainly_valid(schema, value):
        return []
    if nested_deeper(value):
        return [f"the value is nested more than {MAX_NESTING} levels deep; flatten it"]
    async with slots(("isolate", party), PARTY_SLOTS):
        verdict = await run(
            problems_json,
            value,
            dict(schema),
            timeout=CHECK_SECONDS,
            hint="The schema is too costly to check.",
        )
    if isinstance(verdict, ToolResult):  # killed past the deadline, or out of memory
        return [f"{whose} could not be checked: {verdict.content.removeprefix('Error: ')}"]
    found: list[str] = json.loads(str(verdict))
    return found
