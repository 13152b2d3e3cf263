"""Attack round 64, F2: in the user-namespace mode as root, `max_processes` counted
processes but not threads (one call held 9,505 tasks against 64), and the watchdog walked
them in /proc on the event loop every 50 ms (every other run stalled up to ~1 s).

Now RLIMIT_NPROC binds in that mode too (the sandbox is host uid 65534 in user namespaces
of the call's own, fim/tools/sandbox/userns.py), threads included; the watchdog's belt
counts tasks, not processes, reads at most `MAX_TASKS_READ` tasks a poll, and every poll's
reads run in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fim.tools import sandbox
from fim.tools.sandbox import watchdog
from fim.tools.sandbox.limits import Limits
from fim.tools.sandbox.watchdog import Watchdog, census

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)
THREADS = """\
import threading, time
threading.stack_size(65536)
started = 0
try:
    for _ in range({count}):
        threading.Thread(target=time.sleep, args=({hold},), daemon=True).start()
        started += 1
except RuntimeError as exc:
    print(exc)
print("started", started, flush=True)
time.sleep({hold})
"""


@needs_bwrap
async def test_a_call_starting_500_threads_is_stopped_at_max_processes(
    tmp_path: Path, mode: str
) -> None:
    folder = tmp_path / "sandbox"
    done = await sandbox.run(
        ["python3", "-c", THREADS.format(count=500, hold=2)],
        scratch=folder / "scratch",
        folder=folder,
        env={"MALLOC_ARENA_MAX": "1"},  # threads bounded by tasks here, not by memory
    )
    out = done.stdout.text()
    if not done.processes_exceeded:
        assert "can't start new thread" in out, (out, done.stderr.text())
        started = int(out.split("started")[1].split()[0])
        assert started < Limits().max_processes, out


async def test_the_watchdog_counts_threads_as_tasks_against_max_processes() -> None:
    """One process of 20 threads is 20 tasks: past `max_processes` of 5, it is killed."""
    process = await asyncio.create_subprocess_exec(  # a group of its own, as bwrap's
        sys.executable, "-c", THREADS.format(count=20, hold=30), start_new_session=True
    )
    box = Watchdog(process, Limits(max_processes=5), count_processes=True)
    try:
        await asyncio.wait_for(box.watch(), 30)
    finally:
        box.kill()
        await process.wait()
    assert box.processes_exceeded


def test_a_census_counts_threads_and_reads_no_more_tasks_than_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process of 9 threads is 9 tasks; past its budget a census stops reading (it reads
    one `children` file a task) and counts at least the budget."""
    release = threading.Event()
    held = [threading.Thread(target=release.wait) for _ in range(8)]
    for thread in held:
        thread.start()
    read: list[str] = []

    def counting_open(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("/children"):
            read.append(path)
        return open(path, *args, **kwargs)

    try:
        pids, tasks = census(os.getpid())
        monkeypatch.setattr(watchdog, "open", counting_open, raising=False)
        _, counted = census(os.getpid(), budget=3)
    finally:
        release.set()
        for thread in held:
            thread.join()
    assert pids[0] == os.getpid() and tasks >= 9
    assert len(read) <= 3 and counted >= 3


async def test_the_watchdogs_reads_run_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A poll that takes long (thousands of tasks) leaves the loop running: a ticker on
    the loop keeps counting while the census is under way."""
    loop_thread = threading.get_ident()
    ticks = 0
    until: list[int] = []
    ticked = threading.Event()
    seen: dict[str, int] = {}
    real_census = census

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if until and ticks >= until[0]:
                ticked.set()
            await asyncio.sleep(0)

    def slow_census(pid: int, budget: int = watchdog.MAX_TASKS_READ) -> tuple[list[int], int]:
        if "thread" not in seen:
            seen["thread"] = threading.get_ident()
            start = ticks
            until.append(start + 3)
            ticked.wait(5)  # on the loop nothing ticks: this waits its 5 s out, and fails
            seen["ticks"] = ticks - start
        return real_census(pid, budget)

    monkeypatch.setattr(watchdog, "census", slow_census)
    process = await asyncio.create_subprocess_exec("sleep", "30", start_new_session=True)
    box = Watchdog(process, Limits())
    ticking = asyncio.ensure_future(ticker())
    watching = asyncio.ensure_future(box.watch())
    try:
        while "ticks" not in seen:
            await asyncio.sleep(0.01)
    finally:
        watching.cancel()
        ticking.cancel()
        box.kill()
        await process.wait()
    assert seen["thread"] != loop_thread
    assert seen["ticks"] >= 3
