"""One sandboxed command from spawn to exit: pipes, stdin, the deadline, cancellation.

Its own module because the lifecycle is where the hard races live (a cancel while bwrap is
still starting, output pipes inherited by processes that outlive the command, pumps nobody
awaits): whatever happens, the call returns only once the whole tree is gone. The policy
comes from fim/tools/sandbox/command.py, the watching from fim/tools/sandbox/watchdog.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fim import child_stdin
from fim.tools.sandbox import cgroup, seccomp, userns
from fim.tools.sandbox.command import NOBODY, command_line, etc_files, options_by_descriptor
from fim.tools.sandbox.limits import Limits
from fim.tools.sandbox.output import Capture, Outcome
from fim.tools.sandbox.project import ProjectView
from fim.tools.sandbox.watchdog import Watchdog, file_cap, folder_room, free_space


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


CGROUP_SLACK_MB = 16
"""Memory the call's cgroup allows above `memory_mb`: bwrap's own two processes and the
kernel's share (page tables, sockets) are charged there too, and the watchdog, which
counts the program's resident memory only, stays the layer that stops a program mapping
too much (with its message); the cgroup stops what the watchdog cannot see."""


def _memory_cgroup(limits: Limits) -> tuple[cgroup.MemoryCgroup | None, bool]:
    """The call's own memory cgroup (blocking: a few cgroupfs writes), or None where this
    host gives fim none (the watchdog alone then, logged once: fim/tools/sandbox/cgroup.py);
    and whether the host has cgroups but refused this call's (the call must not run)."""
    found = cgroup.base()
    if found is None:
        return None, False
    made = cgroup.create(found, (limits.memory_mb + CGROUP_SLACK_MB) * 1024 * 1024)
    return made, made is None


async def execute(
    argv: Sequence[str],
    scratch: Path,
    stdin: bytes,
    declared: dict[str, str],
    limits: Limits,
    as_root: bool,
    egress: Path | None,
    read_only: Sequence[Path] = (),
    *,
    bwrap: str,
    folder: Path | None = None,
    project: ProjectView | None = None,
) -> Outcome:
    """Run `argv` under `bwrap` (checked, prepared and given a slot by `sandbox.run`) and
    return how it ended; `folder`, the sandbox folder `scratch` is in, is held to
    `limits.folder_mb`; `project` is the read-only project view, if the agent has one.
    Cancelling it kills the tree before re-raising. The whole tree runs
    in a memory cgroup of its own where the host has one, deleted (with anything left in
    it) before this returns or re-raises."""
    group: cgroup.MemoryCgroup | None = None
    try:
        group, refused = await _made_cgroup(limits)
        if refused:  # fail closed: where fim has cgroups, no call runs without its own
            return Outcome(
                returncode=1,
                stdout=Capture(0),
                stderr=Capture(0),
                setup_error="cannot create the call's memory cgroup (fim's log says why)",
            )
        return await _execute(
            argv, scratch, stdin, declared, limits, as_root, egress, read_only,
            bwrap=bwrap, folder=folder, group=group, project=project,
        )  # fmt: skip
    finally:
        if group is not None:
            await asyncio.to_thread(group.remove)


_DISCARDING: set[asyncio.Task[None]] = set()
"""Removals of cancelled calls' cgroups still under way (asyncio keeps weak references to
tasks only)."""


async def _made_cgroup(limits: Limits) -> tuple[cgroup.MemoryCgroup | None, bool]:
    """`_memory_cgroup` in a thread, with no window where a cgroup it makes is left behind
    (attack-18 #5): a thread cannot be stopped, so a call cancelled while it runs (the
    engine's tool timeout, a cancelled run; the first call also runs discovery and the
    sweep there) would otherwise return while the thread goes on to make a cgroup nobody
    removes, and the startup sweep removes only dead processes' ones. On cancellation a
    task of its own takes what the thread makes and removes it; the call waits for that
    (shielded: a second cancel stops only the waiting) and re-raises."""
    making = asyncio.ensure_future(asyncio.to_thread(_memory_cgroup, limits))
    try:
        return await asyncio.shield(making)
    except asyncio.CancelledError:
        discard = asyncio.ensure_future(_discard(making))
        _DISCARDING.add(discard)
        discard.add_done_callback(_DISCARDING.discard)
        discard.add_done_callback(_retrieve)
        with contextlib.suppress(Exception):
            await asyncio.shield(discard)
        raise


async def _discard(making: asyncio.Future[tuple[cgroup.MemoryCgroup | None, bool]]) -> None:
    """Remove the cgroup the thread of a cancelled call makes, once it has made it."""
    made, _ = await making
    if made is not None:
        await asyncio.to_thread(made.remove)


async def _execute(
    argv: Sequence[str],
    scratch: Path,
    stdin: bytes,
    declared: dict[str, str],
    limits: Limits,
    as_root: bool,
    egress: Path | None,
    read_only: Sequence[Path],
    *,
    bwrap: str,
    folder: Path | None,
    group: cgroup.MemoryCgroup | None,
    project: ProjectView | None = None,
) -> Outcome:
    data_fds: dict[str, int] = {}
    passed: list[int] = []
    free_at_start: int | None = None
    inodes_at_start: int | None = None
    with contextlib.suppress(OSError):
        free_at_start, inodes_at_start, _ = free_space(scratch)
    room, held, full = (
        await asyncio.to_thread(folder_room, folder, limits) if folder else (None, 0, False)
    )
    namespaces: tuple[int, int] | None = None
    if os.geteuid() == 0 and not as_root:  # never bwrap's own: it maps onto host root
        try:
            namespaces = await userns.made()
        except OSError as exc:  # fail closed
            return Outcome(returncode=1, stdout=Capture(0), stderr=Capture(0), setup_error=str(exc))
        passed += namespaces
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        for dest, text in etc_files(NOBODY).items():
            read_end, write_end = os.pipe()
            os.write(write_end, text.encode())  # a few bytes: fits the pipe buffer
            os.close(write_end)
            data_fds[dest] = read_end
            passed.append(read_end)
        # a file, not a pipe: no capacity to block on (bwrap reads it to its end)
        seccomp_fd = os.memfd_create("fim-seccomp", os.MFD_CLOEXEC)
        passed.append(seccomp_fd)
        os.write(seccomp_fd, seccomp.program())
        os.lseek(seccomp_fd, 0, os.SEEK_SET)
        policy = command_line(
            argv,
            scratch=scratch,
            env=declared,
            limits=dataclasses.replace(limits, max_file_bytes=file_cap(limits, full)),
            data_fds=data_fds,
            as_root=as_root,
            egress=egress,
            read_only=[p for p in read_only if p.is_dir()],
            bwrap=bwrap,
            seccomp_fd=seccomp_fd,
            project=project,
            userns=namespaces,
        )
        options = os.memfd_create("fim-bwrap-options", os.MFD_CLOEXEC)
        passed.append(options)
        args, data = options_by_descriptor(policy, options)
        if group is not None:  # bwrap starts inside the cgroup: nothing of it runs outside
            args = cgroup.join_argv(group, args)
        os.write(options, data)  # a file, not a pipe: no capacity to block on
        os.lseek(options, 0, os.SEEK_SET)
        # Our own pipes, not asyncio's: Process.wait() would otherwise also wait for
        # every process that inherited stdout.
        spawn = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
                pass_fds=tuple(passed),
                # bwrap's own process is the sandbox's PID 1, its environ readable in a user
                # namespace: it gets nothing (--clearenv only empties the program's)
                env={},
            )
        )
        try:
            process = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # Cancelled while bwrap was starting: asyncio would kill only its outer process.
            # Take the handle once it exists and kill the whole tree, then re-raise.
            with contextlib.suppress(Exception):
                started = await spawn
                Watchdog(started, limits).kill()
                await started.wait()
            raise
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, *passed):
            os.close(fd)
    out, err = Capture(limits.keep_output), Capture(limits.keep_output)
    out_pipe, err_pipe = os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)
    pumps = asyncio.gather(out.pump(out_pipe), err.pump(err_pipe))
    box = Watchdog(
        process,
        limits,
        count_processes=os.geteuid() == 0 and not as_root,
        scratch=scratch,
        free_at_start=free_at_start,
        inodes_at_start=inodes_at_start,
        folder=folder,
        room=room,
        held_at_start=held,
        full_at_start=full,
        cgroup=group,
    )
    watcher = asyncio.ensure_future(box.watch())

    async def feed_and_wait() -> int:
        assert process.stdin is not None
        await child_stdin.feed(process.stdin, stdin)  # a program may exit without reading it
        return await process.wait()

    timed_out = False
    try:
        returncode = await asyncio.wait_for(feed_and_wait(), limits.timeout)
    except TimeoutError:
        timed_out = True
        box.kill()
        returncode = await process.wait()
    except BaseException:  # cancelled by the engine or the registry timeout
        box.kill()
        watcher.cancel()
        pumps.cancel()
        # Nobody awaits the cancelled pumps: retrieve their outcome, or asyncio logs
        # "exception was never retrieved" whenever they are collected.
        pumps.add_done_callback(_retrieve)
        raise
    finally:
        watcher.cancel()
    box.kill()  # normally a no-op: the namespace ended with its command
    await box.gone()
    await box.settle()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pumps, 2)
    setup_error = None
    if returncode == 1 and not out.total and err.text().startswith(("bwrap: ", cgroup.JOIN_ERROR)):
        setup_error = err.text().strip().splitlines()[0]
    # the kernel killed in the cgroup: memory the watchdog could not see (memfd, SysV shm)
    oom_killed = group is not None and group.oom_kills() > 0
    return Outcome(
        returncode=returncode,
        stdout=out,
        stderr=err,
        timed_out=timed_out,
        memory_exceeded=box.memory_exceeded or oom_killed,
        processes_exceeded=box.processes_exceeded,
        disk_exceeded=box.disk_exceeded,
        folder_full=box.folder_full,
        too_many_files=box.too_many_files,
        inodes_low=box.inodes_low,
        folder_mb=limits.folder_mb,
        peak_memory=box.peak,
        setup_error=setup_error,
    )
