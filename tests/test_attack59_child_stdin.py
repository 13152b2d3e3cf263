"""Writing to a child's stdin that the child does not read is no error (attack-59 F2): the
caller goes on to the child's exit code and output. uvloop (`fim serve`'s loop) closes the
pipe as soon as the child exits and then raises `RuntimeError` from `write()`, where the
stdlib loop raised `BrokenPipeError`/`ConnectionResetError` or nothing: both count as
"unread". Each case runs under both loops, with the child's exit (or its closed stdin)
awaited first, so the write always meets a pipe nobody reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from fim import child_stdin

uvloop = pytest.importorskip("uvloop")

LOOPS = {"asyncio": None, "uvloop": uvloop.new_event_loop}
BIG = b"x" * 300_000
"""More than a pipe's buffer (64 KiB): never taken whole by a child that does not read."""


def run_on(loop: str, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_feeding_a_child_that_already_exited_is_no_error(loop: str) -> None:
    async def main() -> tuple[int, bool]:
        child = await asyncio.create_subprocess_exec("true", stdin=asyncio.subprocess.PIPE)
        await child.wait()
        assert child.stdin is not None
        await child_stdin.feed(child.stdin, BIG)
        return child.returncode or 0, child.stdin.is_closing()

    for _ in range(5):
        assert run_on(loop, main) == (0, True)


def test_feeding_a_live_child_that_closed_its_stdin_is_no_error() -> None:
    """The stdlib loop's `ConnectionResetError` from `drain()`. (Under uvloop a child
    cannot close its stdin this way: libuv leaves it a second descriptor of the pipe.)"""

    async def main() -> bool:
        child = await asyncio.create_subprocess_shell(
            "exec 0<&-; echo closed; exec sleep 30",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert child.stdin is not None and child.stdout is not None
        assert await child.stdout.readline() == b"closed\n"
        await child_stdin.feed(child.stdin, BIG)
        alive = child.returncode is None
        child.kill()
        await child.wait()
        return alive and child.stdin.is_closing()

    assert run_on("asyncio", main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_child_that_reads_gets_all_of_it(loop: str) -> None:
    async def main() -> bytes:
        child = await asyncio.create_subprocess_exec(
            "wc", "-c", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert child.stdin is not None and child.stdout is not None
        reading = asyncio.ensure_future(child.stdout.read())
        await child_stdin.feed(child.stdin, BIG)
        out = await reading
        await child.wait()
        return out

    assert run_on(loop, main).strip() == str(len(BIG)).encode()


class OpenPipe:
    """A writer whose pipe is open and whose write fails for another reason."""

    def __init__(self) -> None:
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes) -> None:
        raise RuntimeError("something else broke")

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


async def test_a_runtime_error_on_a_pipe_still_open_is_raised() -> None:
    """Only a pipe closed under the write counts as unread: any other failure is the
    caller's to see (a hook then fails closed)."""
    pipe = OpenPipe()
    with pytest.raises(RuntimeError, match="something else broke"):
        await child_stdin.feed(pipe, b"event")  # type: ignore[arg-type]
    assert pipe.closed
