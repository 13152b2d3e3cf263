"""python_exec: run a Python snippet in a separate, limited process and return its output.

The snippet runs in `sys.executable -I` (isolated: no user site, no PYTHON* variables) with a
minimal environment, its own process group, an address-space limit, a CPU and file-size
limit, and a wall-clock timeout after which the whole group is killed. It is a resource
fence, not a security sandbox: the code runs with the user's permissions, so hooks (e.g.
`confirm`) are the place to gate it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from fim.tools.base import FunctionTool
from fim.tools.builtin._common import clip, fail, sandbox_dir
from fim.types import ToolResult

try:
    import resource
except ImportError:  # Windows: python_exec reports that it needs POSIX
    resource = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from fim.runtime import RunContext

CATEGORY = "compute"
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0
DEFAULT_MEMORY_MB = 512
DEFAULT_MAX_OUTPUT = 10_000
MAX_FILE_BYTES = 64 * 1024 * 1024
_CHUNK = 65_536


def _limits(memory_mb: int, cpu_seconds: int) -> None:
    """Runs in the child between fork and exec, so it only calls setrlimit."""
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _Capture:
    """One output pipe of the child, read to EOF while keeping only the first `keep` bytes:
    a flood of output cannot fill memory and the child never blocks on a full pipe. What was
    read survives cancellation, so a killed run still shows its partial output."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()
        self.total = 0

    async def pump(self, pipe: BinaryIO) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while chunk := await reader.read(_CHUNK):
                self.total += len(chunk)
                if len(self.data) < self.keep:
                    self.data += chunk[: self.keep - len(self.data)]
        finally:
            transport.close()

    def section(self, label: str, limit: int) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if self.total > len(self.data) or len(text) > limit:
            return (
                f"--- {label} ---\n{text[:limit]}\n"
                f"[... {label} truncated: {self.total} bytes in total]"
            )
        return f"--- {label} ---\n{text.rstrip()}"


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _minimal_env(scratch: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


def make(
    ctx: RunContext,
    *,
    memory_mb: int = DEFAULT_MEMORY_MB,
    max_output: int = DEFAULT_MAX_OUTPUT,
    default_timeout: float = DEFAULT_TIMEOUT,
) -> FunctionTool:
    """Build python_exec for one run; its scratch directory is `<sandbox>/scratch`."""
    scratch = sandbox_dir(ctx) / "scratch"

    async def run(code: str, timeout: float | None = None) -> str | ToolResult:
        if resource is None:
            return fail("python_exec needs a POSIX system (resource limits, process groups).")
        limit = min(float(timeout or default_timeout), MAX_TIMEOUT)
        await asyncio.to_thread(scratch.mkdir, parents=True, exist_ok=True)
        # Our own pipes, not asyncio's: Process.wait() would otherwise also wait for
        # every grandchild that inherited stdout to exit.
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-",
                stdin=asyncio.subprocess.PIPE,
                stdout=out_w,
                stderr=err_w,
                cwd=scratch,
                env=_minimal_env(scratch),
                start_new_session=True,
                preexec_fn=lambda: _limits(memory_mb, int(limit) + 1),
            )
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        keep = max_output * 4  # bytes: enough for max_output characters of UTF-8
        out, err = _Capture(keep), _Capture(keep)
        # File objects now, so the descriptors are closed even if the pumps never start.
        out_pipe, err_pipe = (
            os.fdopen(out_r, "rb", buffering=0),
            os.fdopen(err_r, "rb", buffering=0),
        )
        pumps = asyncio.gather(out.pump(out_pipe), err.pump(err_pipe))

        async def feed_and_wait() -> int:
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                process.stdin.write(code.encode("utf-8"))
                await process.stdin.drain()
                process.stdin.close()
            return await process.wait()

        timed_out = False
        try:
            returncode = await asyncio.wait_for(feed_and_wait(), limit)
        except TimeoutError:
            timed_out = True
            _kill_group(process)
            returncode = await process.wait()
        except BaseException:  # cancelled by the engine or the registry timeout
            _kill_group(process)
            pumps.cancel()
            # Nobody awaits the cancelled pumps: retrieve their outcome, or asyncio logs
            # "exception was never retrieved" with a traceback whenever they are collected.
            pumps.add_done_callback(_retrieve)
            raise
        _kill_group(process)  # background children of the snippet die with it
        with contextlib.suppress(TimeoutError):  # a detached grandchild holds a pipe
            await asyncio.wait_for(pumps, 2)

        parts = []
        if out.total:
            parts.append(out.section("stdout", max_output))
        if err.total:
            parts.append(err.section("stderr", max_output))
        body = "\n".join(parts) or "(no output: use print() to show results)"
        if timed_out:
            return fail(
                f"the code did not finish within {limit:g}s and was killed. "
                "Make it faster, work on less data, or pass a larger timeout.\n" + body
            )
        if returncode != 0:
            hint = "Read the traceback, fix the code and run it again."
            if b"MemoryError" in err.data or returncode in (-signal.SIGKILL, -signal.SIGSEGV):
                hint = (
                    f"The process may have hit the memory limit of {memory_mb} MB; "
                    "use less memory (process data in chunks). " + hint
                )
            return ToolResult(content=f"[exit code {returncode}] {hint}\n{body}", is_error=True)
        return clip(f"[exit code 0]\n{body}", max_output * 2 + 200)

    return FunctionTool(
        name="python_exec",
        description=(
            "Run a Python 3 program in a fresh, isolated process. Only what it prints comes "
            "back (stdout and stderr). For data processing or parsing easier in code. It runs "
            f"in the sandbox's `scratch/` folder (files persist there), with {memory_mb} MB "
            f"of memory, a {default_timeout:g}s default timeout and maybe no network."
        ),
        parameters={
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "minLength": 1,
                    "description": "A complete Python program; use print() for results.",
                },
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MAX_TIMEOUT,
                    "description": f"Seconds before the process is killed "
                    f"(default {default_timeout:g}).",
                },
            },
            "required": ["code"],
            "additionalProperties": False,
        },
        fn=run,
        category=CATEGORY,
        metadata={"builtin": True, "access": "write", "sandbox": str(scratch)},
    )
