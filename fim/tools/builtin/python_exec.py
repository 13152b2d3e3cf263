"""python_exec: run a Python snippet in the OS sandbox and return its output.

The snippet runs as `python -I -` (isolated: no user site, no PYTHON* variables) on the
Python fim runs on, inside bubblewrap (fim/tools/sandbox/): its own PID, network, IPC and
UTS namespaces, an unprivileged user, read-only system folders, no network (HTTP(S) through
the guarded egress proxy with `sandbox: {network: true}`), an empty environment but what the
agent declares (`sandbox.env`), and the sandbox's `scratch/` as the only writable folder.
CPU, memory (per process and for the whole tree), processes, file size and output are
capped; at the deadline the whole process tree is killed. Without bubblewrap the tool
refuses to run (one line saying how to install it).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from fim.tools.base import FunctionTool
from fim.tools.builtin._common import fail, sandbox_dir
from fim.tools.skill_dirs import skill_dirs
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.run.services import RunContext

CATEGORY = "compute"
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0
DEFAULT_MAX_OUTPUT = 10_000
MAX_FILE_BYTES = 64 * 1024 * 1024


def make(
    ctx: RunContext,
    *,
    max_output: int = DEFAULT_MAX_OUTPUT,
    default_timeout: float = DEFAULT_TIMEOUT,
) -> FunctionTool:
    """Build python_exec for one run; its scratch directory is `<sandbox>/scratch`."""
    # deferred: loading fim.tools.sandbox costs tens of ms
    from fim.tools import sandbox

    scratch = sandbox_dir(ctx) / "scratch"
    settings = ctx.agent.sandbox
    memory_mb = settings.memory_mb

    async def run(code: str, timeout: float | None = None) -> str | ToolResult:
        why = await sandbox.refused()
        if why is not None:
            return fail(why + ".")
        limit = min(float(timeout or default_timeout), MAX_TIMEOUT)
        limits = sandbox.Limits(
            timeout=limit,
            memory_mb=memory_mb,
            max_processes=settings.max_processes,
            folder_mb=settings.folder_mb,
            max_file_bytes=MAX_FILE_BYTES,
            keep_output=max_output * 4,  # bytes: enough for max_output characters of UTF-8
        )
        project = await sandbox.project_for(ctx.snapshot, settings.project)
        if project is not None and project.refused:  # fim validate reports it too
            return fail(project.refused + ".")
        outcome = await sandbox.run(
            [sys.executable, "-I", "-"],
            scratch=scratch,
            folder=scratch.parent,
            stdin=code.encode("utf-8"),
            env=settings.env,
            limits=limits,
            read_only=skill_dirs(ctx),
            network=ctx.snapshot.project.web_fetch if settings.network else None,
            project=project,
        )
        return sandbox.observation(
            outcome,
            limit=limit,
            memory_mb=memory_mb,
            max_output=max_output,
            fix="Read the traceback, fix the code and run it again.",
            empty="(no output: use print() to show results)",
        )

    reach = "HTTP(S) to public hosts only" if settings.network else "no network"
    where = (
        f"The project is at {sandbox.PROJECT_MOUNT}, read-only, the working directory (fim's "
        "own .fim/ is hidden); write files in $HOME, the sandbox's `scratch/` folder (files "
        "persist there)"
        if settings.project == "read"
        else "It runs in the sandbox's `scratch/` folder (files persist there)"
    )
    return FunctionTool(
        name="python_exec",
        description=(
            "Run a Python 3 program in a fresh, isolated sandbox. Only what it prints comes "
            "back (stdout and stderr). For data processing or parsing easier in code. "
            f"{where}, with {memory_mb} MB of memory, a {default_timeout:g}s default timeout "
            f"and {reach}."
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
