"""shell: run a bash command in the OS sandbox and return its output.

`bash -c COMMAND` runs inside bubblewrap with exactly python_exec's policy and limits
(fim/tools/sandbox/): no network unless `sandbox: {network: true}` (then HTTP(S) through
the guarded proxy), an unprivileged user, read-only system folders, the sandbox's
`scratch/` as the only writable folder and working directory, an empty environment but what
the agent declares, and the whole process tree killed at the deadline.

Off unless an agent lists `shell` in `tools:` (`EXPLICIT`): `tool_categories: [compute]`
brings python_exec, never a shell. The argument is named `command`, like
Claude Code's Bash tool (`tool_input.command`), so hooks written for Claude Code read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fim.tools.base import FunctionTool
from fim.tools.builtin._common import fail, sandbox_dir
from fim.tools.skill_dirs import skill_dirs
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.run.services import RunContext

CATEGORY = "compute"
EXPLICIT = True
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0
MAX_OUTPUT = 10_000
MAX_COMMAND = 100_000
MAX_FILE_BYTES = 64 * 1024 * 1024


def make(ctx: RunContext) -> FunctionTool:
    """Build shell for one run; it works in `<sandbox>/scratch`, shared with python_exec."""
    # deferred: loading fim.tools.sandbox costs tens of ms
    from fim.tools import sandbox

    scratch = sandbox_dir(ctx) / "scratch"
    settings = ctx.agent.sandbox

    async def run(command: str, timeout: float | None = None) -> str | ToolResult:
        why = await sandbox.refused()
        if why is not None:
            return fail(why + ".")
        if "\x00" in command:
            return fail("the command contains a NUL character; remove it.")
        limit = min(float(timeout or DEFAULT_TIMEOUT), MAX_TIMEOUT)
        limits = sandbox.Limits(
            timeout=limit,
            memory_mb=settings.memory_mb,
            max_processes=settings.max_processes,
            folder_mb=settings.folder_mb,
            max_file_bytes=MAX_FILE_BYTES,
            keep_output=MAX_OUTPUT * 4,
        )
        project = await sandbox.project_for(ctx.snapshot, settings.project)
        if project is not None and project.refused:  # fim validate reports it too
            return fail(project.refused + ".")
        outcome = await sandbox.run(
            ["bash", "-c", command],
            scratch=scratch,
            folder=scratch.parent,
            # SessionStart hooks may export variables (CLAUDE_ENV_FILE); the agent's own win.
            env={**ctx.session_env, **settings.env},
            limits=limits,
            read_only=skill_dirs(ctx),
            network=ctx.snapshot.project.web_fetch if settings.network else None,
            project=project,
        )
        return sandbox.observation(
            outcome,
            limit=limit,
            memory_mb=settings.memory_mb,
            max_output=MAX_OUTPUT,
            fix="Read the error output, fix the command and run it again.",
            empty="(no output)",
            what="the command",
        )

    reach = "HTTP(S) to public hosts only" if settings.network else "no network"
    where = (
        f"The project is at {sandbox.PROJECT_MOUNT}, read-only, the working directory (fim's "
        "own .fim/ is hidden); write files in $HOME, the sandbox's `scratch/` folder (files "
        "persist there, shared with python_exec)"
        if settings.project == "read"
        else "It works in the sandbox's `scratch/` folder (files persist there, shared with "
        "python_exec)"
    )
    return FunctionTool(
        name="shell",
        description=(
            "Run a bash command in an isolated sandbox, for file processing and command-line "
            f"tools (grep, sed, awk, sort, python3). {where}, with {settings.memory_mb} MB of "
            f"memory, a {DEFAULT_TIMEOUT:g}s default timeout and {reach}. Returns the exit "
            "code, stdout and stderr."
        ),
        parameters={
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_COMMAND,
                    "description": "The bash command line, e.g. 'wc -l data.csv'.",
                },
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MAX_TIMEOUT,
                    "description": f"Seconds before it is killed (default {DEFAULT_TIMEOUT:g}).",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        fn=run,
        category=CATEGORY,
        metadata={"builtin": True, "access": "write", "sandbox": str(scratch)},
    )
