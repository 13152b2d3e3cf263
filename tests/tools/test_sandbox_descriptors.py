"""Only stdin, stdout and stderr reach a sandboxed program, whatever fim's process was
started with and whichever event loop spawns it (attack-42 F1: under `fim serve`'s uvloop,
`shell` and `python_exec` wrote to a host file through a descriptor fim had inherited)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from fim.environ import keep_inherited_descriptors
from fim.tools import sandbox

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)

PROBE = (
    "import os, sys\n"
    "print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))\n"
    "try:\n"
    "    os.write(int(sys.argv[1]), b'FROM-THE-SANDBOX')\n"
    "    print('wrote')\n"
    "except OSError as exc:\n"
    "    print('refused', exc.errno)\n"
)


def _inherited(path: Path) -> int:
    """A descriptor on a host file, open across exec: what a CI runner or a supervisor
    leaves to the processes it starts."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.set_inheritable(fd, True)
    return fd


async def _probe(tmp_path: Path, fd: int) -> str:
    outcome = await sandbox.run(
        ["python3", "-c", PROBE, str(fd)], scratch=tmp_path / "box" / "scratch"
    )
    assert outcome.returncode == 0, outcome.stderr.text()
    return outcome.stdout.text()


@needs_bwrap
def test_a_descriptor_left_open_by_the_spawn_never_reaches_the_program(tmp_path: Path) -> None:
    """uvloop spawns through libuv, which keeps every inheritable descriptor: the sandbox's
    launcher closes all but 0-2 before the program starts (the listing's own is 3)."""
    uvloop = pytest.importorskip("uvloop")
    host_file = tmp_path / "host-file"
    fd = _inherited(host_file)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            seen = runner.run(_probe(tmp_path, fd))
    finally:
        os.close(fd)
    assert seen.splitlines() == ["[0, 1, 2, 3]", "refused 9"]  # EBADF
    assert host_file.read_bytes() == b""


def test_fim_keeps_the_descriptors_it_was_started_with_from_its_children(
    tmp_path: Path,
) -> None:
    """At start (`fim.environ.hide_from_children`) every inherited descriptor is marked
    close-on-exec: an MCP server or a hook command fim starts does not get it either, and
    fim itself can still use it."""
    fd = _inherited(tmp_path / "host-file")
    try:
        keep_inherited_descriptors()
        assert not os.get_inheritable(fd)
        os.write(fd, b"still fim's")
    finally:
        os.close(fd)
    assert (tmp_path / "host-file").read_bytes() == b"still fim's"
