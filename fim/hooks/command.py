"""Shell command hooks speaking the Claude Code hook protocol, so its scripts work unchanged.

The event goes to the command as JSON on stdin (`hook_event_name`, `session_id`, `cwd`,
`permission_mode`, `tool_name`, `tool_input`, `tool_use_id`, `tool_response`, `source`).
The command answers with its exit code and, on exit 0, optional JSON on stdout:

- exit 0, no output or plain text: allow (plain text at SessionStart becomes context);
- exit 0 with a JSON object: `continue: false` (+`stopReason`) blocks; `decision: "block"`
  (+`reason`) blocks; `hookSpecificOutput.permissionDecision` `deny` blocks, `ask` asks a
  human through the state store, `allow` allows (+`permissionDecisionReason`);
  `hookSpecificOutput.updatedInput` rewrites the arguments; `additionalContext` adds
  context (at PostToolUse it is appended to the observation the model reads);
  `hookSpecificOutput.updatedMCPToolOutput` replaces the observation;
- exit 2: block, with stderr as the reason the model reads (and a hint when it reads like
  a certificate or proxy failure: `uv` exits 2 when a download fails);
- any other exit code, a timeout, or JSON that is not exactly the documented shape
  (unknown keys or decision words, wrong types, a byte-order mark or other invisible
  character before it, trailing text, duplicate keys): block, naming the hook and what was
  wrong (hooks fail closed; Claude Code would let some of these through).

The command sees Claude Code's names where fim has an equivalent (`shell` is `Bash`, MCP
tools are `mcp__<server>__<tool>`; see `fim.hooks.claude`), runs with an allow-listed
environment (PATH, HOME, LANG, the CA bundle and proxy variables of `fim.config.child_env`,
the protocol's CLAUDE_*/FIM_* variables and what the declaration lists under `env:`), and
gets `transcript_path`, a JSONL file of the run so far.
At SessionStart, lines `export NAME=value` it writes to `$CLAUDE_ENV_FILE` become
environment of the run's `shell` tool.

A script of the hooks folder or `.claude/hooks/` (however the command reaches it), or one of the
project the command names (`scripts/x.sh`), runs only as its snapshot compiled it: one
changed, added or removed since blocks the call until a reload picks it up
(`fim.hooks.command_pins`).

This file is the hook kind: its options, its events and what an exit code means. What the
command is given is in `fim.hooks.command_input`, how its JSON answer is decided in
`fim.hooks.command_output`, and the process it runs as (killed with its whole group on a
timeout) in `fim.hooks.command_process`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fim.config.child_env import NETWORK_FAILURE, network_env, network_hint, withheld_note
from fim.hooks.base import BaseHook, HookFailed, log
from fim.hooks.command_input import environment, event_payload, read_env_file, write_transcript
from fim.hooks.command_output import interpret
from fim.hooks.command_pins import changed_script
from fim.hooks.command_process import run_command
from fim.masking import known
from fim.tools.builtin._common import sandbox_dir
from fim.types import HookContext, HookPoint, HookResult

MAX_STDERR_TAIL = 500
"""The most of a failed hook command's stderr (its last characters) the block quotes."""


class CommandOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ask_timeout: float = Field(default=300.0, gt=0)
    """Seconds a human has to decide when the command answers `permissionDecision: ask`."""


class CommandHook(BaseHook):
    """Runs `command` through the shell in the project root for each matching event."""

    Options: ClassVar[type[BaseModel]] = CommandOptions

    def __init__(
        self,
        command: str,
        event: HookPoint,
        env: list[str] | dict[str, str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.command = command
        self.event: HookPoint = event
        self.env = env or []

    @property
    def points(self) -> tuple[HookPoint, ...]:
        return (self.event,)

    def chain_timeout(self) -> float:
        # The command's own timeout is enforced here (to kill its process group); the chain
        # adds room for an `ask` that waits on a human.
        return self.timeout + self.options.ask_timeout + 10.0

    # ------------------------------------------------------------------ protocol

    def payload(self, context: HookContext) -> dict[str, Any]:
        """The JSON the command reads on stdin (see `fim.hooks.command_input`)."""
        transcript = write_transcript(self.run_context, context)
        return event_payload(context, self._root(), transcript, self._files(), self.run_context)

    def _files(self) -> Path | None:
        """The folder the run's `file_ops` works in (its paths are given absolute)."""
        return sandbox_dir(self.run_context) if self.run_context is not None else None

    def _root(self) -> str:
        if self.run_context is not None:
            return str(self.run_context.snapshot.root)
        return os.getcwd()

    async def __call__(self, context: HookContext) -> HookResult:
        if self.run_context is not None:  # its scripts as its snapshot compiled them, or not
            snapshot = self.run_context.snapshot
            # in a thread: a stat per pinned file (up to 1,000) and a hash of one that
            # changed (up to 8 MiB) would hold the event loop
            refused = await asyncio.to_thread(
                changed_script,
                snapshot.root,
                snapshot.command_files.get(self.command, ()),
                snapshot.version,
                snapshot.hook_folders,
                snapshot.hook_folder_files,
            )
            if refused is not None:
                return HookResult(allow=False, error=refused)
        env_file = None
        if context.point == "SessionStart":
            handle, env_file = tempfile.mkstemp(prefix="fim-env-", suffix=".sh")
            os.close(handle)
        try:
            given = environment(context, self.env, self._root(), env_file)
            code, stdout, stderr = await run_command(
                self.command,
                json.dumps(self.payload(context), default=str),
                given,
                cwd=self._root(),
                timeout=self.timeout,
            )
            if env_file is not None and code == 0 and self.run_context is not None:
                self.run_context.session_env.update(read_env_file(env_file))
        finally:
            if env_file is not None:
                with contextlib.suppress(OSError):
                    os.unlink(env_file)
        refused = "the call was blocked because hooks fail closed"
        if self.event == "SessionStart":  # no call: the session is what a failure stops
            refused = (
                "it is optional (hooks fail closed otherwise)"
                if self.optional
                else "the session was refused because hooks fail closed"
            )
        if code is None:
            return HookFailed(
                error=f"hook command timed out after {self.timeout:g}s and was killed; {refused}",
            )
        if code == 2:  # Claude Code's block, also when a tool's error ended the hook with 2
            reason = stderr.strip() or "the hook command exited with code 2 without a reason"
            if NETWORK_FAILURE.search(stderr):  # uv's exit 2 on a certificate it cannot verify
                self._withheld(given)
                reason += f" ({network_hint(NETWORK_HOW)})"
            return HookResult(allow=False, error=reason)
        if code != 0:
            # masked whole, then cut (`Masker.tail`): cut first, the end of a secret the
            # hook printed (its `env:` token, after the tool input it echoes) went out
            tail, cut = known().tail(stderr.strip(), MAX_STDERR_TAIL)
            tail = "..." + tail if cut else tail
            if missing := not_passed(stderr, given):
                listed = ", ".join(missing)
                log.warning(
                    "hook '%s' failed; %s %s set for fim but not passed to hooks, which get "
                    "an allow-listed environment: add `env: [%s]` to the hook",
                    self.name, listed, "is" if len(missing) == 1 else "are", listed,
                )  # fmt: skip
            if NETWORK_FAILURE.search(stderr):
                self._withheld(given)
            return HookFailed(
                error=f"hook command failed with exit code {code}"
                + (f": {tail}" if tail else "")
                + f"; {refused} "
                + f"({failure_hint(stderr, code, self.command)})",
            )
        if stderr.strip():
            self._show_stderr(stderr.strip())
        return await interpret(
            self, context, stdout, ask_timeout=self.options.ask_timeout, files=self._files()
        )

    def _withheld(self, given: Mapping[str, str]) -> None:
        """Tell fim's log (the operator, never the model) which proxy variables a hook that
        failed like a certificate or proxy error was not given: credentials in the URL."""
        if withheld := [n for n in network_env(os.environ)[1] if n not in given]:
            how = f"`env: [{', '.join(withheld)}]` on the hook"
            log.warning(withheld_note(f"hook '{self.name}'", withheld, how))

    def _show_stderr(self, stderr: str) -> None:
        """What a hook that succeeded wrote on stderr, for the operator only: a `fim.hooks`
        log line at INFO (`fim run -v` prints it, as Claude Code's verbose mode does;
        `fim serve --log-level info`), masked, then cut to its end. Not an event: a hook's
        own debug output (a URL with a password fim does not know) is not the API
        caller's or the model's to read (attack-34 #3)."""
        tail, cut = known().tail(stderr, MAX_STDERR_TAIL)
        log.info("hook '%s' stderr: %s%s", self.name, "..." if cut else "", known().text(tail))


ENV_HINT = (
    "a hook gets an allow-listed environment (PATH, HOME, LANG, ...): a variable it "
    "needs from fim's is passed with `env: [NAME]` on the hook"
)
"""Why a hook that works in a terminal can fail under fim (`fim.hooks.command_input.
environment`), in the block message the model and the caller read."""

EXIT_HINT = (
    "in fim only exit 0 allows; Claude Code treats exit 1 as non-blocking: end a logging "
    "hook with `|| true`"
)
"""Why a hook ported from Claude Code blocks in fim: there, an exit code other than 0 and 2
only logs, so a logging hook that fails now and then is harmless; fim fails closed."""

_MISSING = re.compile(
    r"not set|\bunset\b|unbound variable|undefined variable|KeyError|environment variable|"
    r"not logged in|credential|token|unauthori[sz]ed|authenticat",
    re.IGNORECASE,
)
"""What a hook's stderr says when it lacks a variable or the credential one would hold
(bash `set -u`'s "unbound variable", Python's `KeyError: 'TOKEN'`, `gh`'s "not logged
in"): the usual reason a hook that works in a terminal fails under fim's allow-listed
environment."""


NETWORK_HOW = "`env: [NAME]` on the hook"
"""How a hook is given a variable fim withholds (`fim.config.child_env.network_hint`)."""

NOT_INSTALLED_HINT = (
    "'{program}' is not installed or not on the PATH fim runs with: install it where fim "
    "runs, or write its full path in the command"
)
"""Why the shell said `uv: not found` for the program the command starts with."""

_NOT_FOUND = re.compile(r"([^\s:]+): (?:command )?not found")
"""A shell's word for a program it could not find (`/bin/sh: 1: uv: not found`, bash's
`uv: command not found`)."""

NOT_RUNNABLE_HINT = (
    "the command or its interpreter was not found or cannot run: check the script's #! "
    "line (Windows line endings end it in \\r, and /bin/sh\\r is not found: "
    "sed -i 's/\\r$//' {script}) and that the program is installed"
)
"""Why a hook's shell said `not found` (127) or `cannot execute` (126) for a script that is
there: its `#!` line names no program this system has (a CR from Windows line endings, an
interpreter not installed). `fim validate` finds both (`fim.build.hook_shebang`); this is
for a script changed since, or a program the script itself runs."""


def failure_hint(stderr: str, code: int = 1, command: str = "") -> str:
    """The hint of a hook that exited with a code other than 0 or 2, by its exit code:
    126/127 (the shell could not find or start a program) name the command's program when
    the shell said it is not found (`uv: not found` for `uv run ...`), else point at the
    script's `#!` line and the program's installation; otherwise the CA bundle and proxy
    variables when its stderr reads like a certificate or proxy failure, the environment
    allow-list when it reads like a missing variable or credential, else what an exit code
    means in fim (a Claude Code user's exit 1 was non-blocking there). The stderr is only
    matched, never quoted here: the block message already shows its tail."""
    words = [word for word in command.split() if not re.match(r"^[A-Za-z_]\w*=", word)]
    if code in (126, 127):
        if code == 127 and words and words[0] in _NOT_FOUND.findall(stderr):
            return NOT_INSTALLED_HINT.format(program=words[0])
        script = words[0] if words and "/" in words[0] else "SCRIPT"
        return NOT_RUNNABLE_HINT.format(script=script)
    if NETWORK_FAILURE.search(stderr):
        return network_hint(NETWORK_HOW)
    return ENV_HINT if _MISSING.search(stderr) else EXIT_HINT


def not_passed(stderr: str, given: Mapping[str, str]) -> list[str]:
    """The variables a failing hook's stderr names (`GITHUB_TOKEN is not set`) that fim has
    and the hook was not given: told to the operator's log, never to the model or an API
    caller, who would learn which secrets fim holds (attack-34 #7). Names only."""
    return [
        name
        for name in dict.fromkeys(_VARIABLE.findall(stderr))
        if name in os.environ and name not in given
    ][:3]


_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9_]+\b")
"""An environment variable's name as a hook's message would write it (upper case)."""
