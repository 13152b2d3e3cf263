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
- exit 2: block, with stderr as the reason the model reads;
- any other exit code, a timeout, or JSON that is not exactly the documented shape
  (unknown keys or decision words, wrong types, a byte-order mark or other invisible
  character before it, trailing text, duplicate keys): block, naming the hook and what was
  wrong (hooks fail closed; Claude Code would let some of these through).

The command sees Claude Code's names where fim has an equivalent (`shell` is `Bash`, MCP
tools are `mcp__<server>__<tool>`; see `fim.hooks.claude`), runs with an allow-listed
environment (PATH, HOME, LANG, the protocol's CLAUDE_*/FIM_* variables and what the
declaration lists under `env:`), and gets `transcript_path`, a JSONL file of the run so far.
At SessionStart, lines `export NAME=value` it writes to `$CLAUDE_ENV_FILE` become
environment of the run's `shell` tool.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from fim.hooks.base import BaseHook
from fim.hooks.claude import from_claude, to_claude

if TYPE_CHECKING:
    import asyncio
from fim.types import HookContext, HookPoint, HookResult

_PASSED_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "USER", "SHELL")
"""What every hook process gets from fim's environment; LC_* too. Nothing else unless
declared: model and connector keys stay in fim."""


class _Exact(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Specific(_Exact):
    """`hookSpecificOutput` of Claude Code's documented shape."""

    hookEventName: Literal["SessionStart", "PreToolUse", "PostToolUse"] | None = None
    permissionDecision: Literal["allow", "deny", "ask"] | None = None
    permissionDecisionReason: StrictStr | None = None
    updatedInput: dict[str, Any] | None = None
    additionalContext: StrictStr | None = None
    updatedMCPToolOutput: Any = None


class HookOutput(_Exact):
    """The JSON a command may print on exit 0; anything else blocks (fail closed)."""

    continue_: StrictBool | None = Field(default=None, alias="continue")
    stopReason: StrictStr | None = None
    suppressOutput: StrictBool | None = None
    systemMessage: StrictStr | None = None
    decision: Literal["approve", "block"] | None = None
    reason: StrictStr | None = None
    hookSpecificOutput: _Specific | None = None
    updatedInput: dict[str, Any] | None = None
    additionalContext: StrictStr | None = None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ValueError(f"duplicate key {dupes[0]!r}")
    return dict(pairs)


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
        root = self._root()
        data: dict[str, Any] = {
            "session_id": context.run_id,
            "transcript_path": self._transcript(context),
            "cwd": root,
            "permission_mode": "default",
            "hook_event_name": context.point,
        }
        if context.point == "SessionStart":
            data["source"] = "startup"
        else:
            claude = to_claude(context.tool_name, context.tool_args, context.metadata)
            name, args = claude or (context.tool_name, context.tool_args or {})
            data["tool_name"] = name
            data["tool_input"] = args
            if context.metadata.get("call_id"):
                data["tool_use_id"] = context.metadata["call_id"]
        if context.point == "PostToolUse":
            data["tool_response"] = _as_json(context.tool_result)
        data["fim"] = {
            "agent": context.agent,
            "tool_name": context.tool_name,
            "tool_input": context.tool_args,
            "metadata": {
                k: v for k, v in context.metadata.items() if _jsonable(v) and k[:1] != "_"
            },
        }
        return data

    def _root(self) -> str:
        if self.run_context is not None:
            return str(self.run_context.snapshot.root)
        return os.getcwd()

    def _transcript(self, context: HookContext) -> str | None:
        """Write the run so far as JSONL (Claude Code's `transcript_path`), masked."""
        run = self.run_context
        if run is None:
            return None

        folder = Path(run.snapshot.root) / ".fim" / "transcripts"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{context.run_id}.jsonl"
        mask_value = run.snapshot.masker.value
        lines = []
        for message in run.transcript:
            entry = {"type": message.role, "message": message.model_dump(exclude_none=True)}
            lines.append(json.dumps(mask_value(entry), ensure_ascii=False, default=str))
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        return str(path)

    def _environment(self, context: HookContext, env_file: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in _PASSED_ENV or k.startswith("LC_")}
        env.setdefault("PATH", os.defpath)
        if isinstance(self.env, dict):
            env.update({k: str(v) for k, v in self.env.items()})
        else:
            env.update({k: os.environ[k] for k in self.env if k in os.environ})
        root = self._root()
        env["CLAUDE_PROJECT_DIR"] = root
        env["FIM_PROJECT_DIR"] = root
        env["FIM_AGENT"] = context.agent
        env["FIM_RUN_ID"] = context.run_id
        env["FIM_HOOK_EVENT"] = context.point
        if env_file is not None:
            env["CLAUDE_ENV_FILE"] = env_file
        return env

    async def __call__(self, context: HookContext) -> HookResult:
        env_file = None
        if context.point == "SessionStart":
            handle, env_file = tempfile.mkstemp(prefix="fim-env-", suffix=".sh")
            os.close(handle)
        try:
            code, stdout, stderr = await self._execute(
                json.dumps(self.payload(context), default=str),
                self._environment(context, env_file),
            )
            if env_file is not None and code == 0 and self.run_context is not None:
                self.run_context.session_env.update(_read_env_file(env_file))
        finally:
            if env_file is not None:
                with contextlib.suppress(OSError):
                    os.unlink(env_file)
        if code is None:
            return HookResult(
                allow=False,
                error=f"hook command timed out after {self.timeout:g}s and was killed; the "
                "call was blocked because hooks fail closed",
            )
        if code == 2:
            reason = stderr.strip() or "the hook command exited with code 2 without a reason"
            return HookResult(allow=False, error=reason)
        if code != 0:
            tail = stderr.strip()[-500:]
            return HookResult(
                allow=False,
                error=f"hook command failed with exit code {code}"
                + (f": {tail}" if tail else "")
                + "; the call was blocked because hooks fail closed",
            )
        return await self._interpret(context, stdout)

    async def _execute(self, stdin: str, env: dict[str, str]) -> tuple[int | None, str, str]:
        """Exit code (None on timeout), stdout and stderr of one run of the command."""
        import asyncio  # here, not at import: the compiler's hook check loads this module

        process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self._root(),
            env=env,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(
                process.communicate(stdin.encode()), timeout=self.timeout
            )
        except TimeoutError:
            await _kill(process)
            return None, "", ""
        except BaseException:
            await _kill(process)
            raise
        return (
            process.returncode if process.returncode is not None else -1,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
        )

    async def _interpret(self, context: HookContext, stdout: str) -> HookResult:
        text = stdout.strip(" \t\r\n")
        if not text:
            return HookResult()
        lead = text.lstrip("\ufeff\u200b\u200c\u200d\u2060\u00a0")
        if lead != text:
            return self._refuse(
                "printed an invisible character (a byte-order mark or zero-width space) "
                "before its output"
            )
        if not text.startswith(("{", "[")):
            if context.point == "SessionStart":
                return HookResult(additional_context=text)
            return HookResult(side_effects=[f"output: {text[:200]}"])
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            return self._refuse(
                f"printed invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            )
        except ValueError as exc:
            return self._refuse(f"printed ambiguous JSON ({exc})")
        if not isinstance(data, dict):
            return self._refuse("printed JSON that is not an object")
        try:
            output = HookOutput.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "output"
            return self._refuse(
                f"printed JSON that is not the documented shape ({where}: {err['msg']})"
            )
        specific = output.hookSpecificOutput
        if specific is not None and specific.hookEventName not in (None, context.point):
            return self._refuse(
                f"answered hookEventName {specific.hookEventName!r} to a {context.point} event"
            )
        return await self._decide(context, output)

    def _refuse(self, what: str) -> HookResult:
        return HookResult(
            allow=False,
            error=f"hook '{self.name}' {what}; the call was blocked because hooks fail closed "
            "(see the README's hook output rules)",
        )

    async def _decide(self, context: HookContext, out: HookOutput) -> HookResult:
        specific = out.hookSpecificOutput or _Specific()
        message = out.systemMessage
        effects = [f"message: {message}"] if message else []

        def reason(text: str | None, fallback: str) -> str:
            parts = [p for p in (text, message) if p]
            return " — ".join(dict.fromkeys(parts)) or fallback

        if out.continue_ is False:
            return HookResult(
                allow=False,
                error=reason(out.stopReason, "the hook command asked to stop"),
                side_effects=effects,
            )
        permission = specific.permissionDecision
        why = specific.permissionDecisionReason or out.reason
        if permission == "deny" or out.decision == "block":
            return HookResult(
                allow=False,
                error=reason(why, "blocked by a hook command without a reason"),
                side_effects=effects,
            )
        changes: dict[str, Any] = {"side_effects": effects}
        updated = specific.updatedInput if specific.updatedInput is not None else out.updatedInput
        if updated is not None:
            if context.point != "PreToolUse":
                return self._refuse(f"sent updatedInput at {context.point}")
            claude = to_claude(context.tool_name, context.tool_args, context.metadata)
            changes["modified_args"] = (
                from_claude(context.tool_name, updated, context.tool_args)
                if claude is not None
                else updated
            )
        extra = specific.additionalContext or out.additionalContext
        if context.point == "PostToolUse":
            replaced = specific.updatedMCPToolOutput
            text = context.tool_result or ""
            if replaced is not None:
                text = replaced if isinstance(replaced, str) else json.dumps(replaced)
            if extra:
                text = f"{text}\n\n{extra}"
            if replaced is not None or extra:
                changes["modified_result"] = text
        elif extra:
            changes["additional_context"] = str(extra)
        if permission == "ask":
            # deferred: loading fim.hooks.approval costs tens of ms
            from fim.hooks.approval import ask_human

            asked = await ask_human(
                self,
                context.model_copy(
                    update={"tool_args": changes.get("modified_args", context.tool_args)}
                ),
                reason=reason(why, "a hook command asked for confirmation"),
                timeout=self.options.ask_timeout,
            )
            if not asked.allow:
                return asked
            changes["side_effects"] = [*effects, *asked.side_effects]
        return HookResult(**changes)


def _read_env_file(path: str) -> dict[str, str]:
    """`export NAME=value` / `NAME=value` lines a SessionStart hook wrote to CLAUDE_ENV_FILE."""

    found: dict[str, str] = {}
    try:
        text = open(path, encoding="utf-8").read()  # noqa: SIM115 - small file, read once
    except OSError:
        return found
    for line in text.splitlines():
        match = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if match is None:
            continue
        try:
            parts = shlex.split(match.group(2))
        except ValueError:
            continue
        found[match.group(1)] = parts[0] if parts else ""
    return found


async def _kill(process: asyncio.subprocess.Process) -> None:
    # deferred: loading asyncio costs a few ms
    import asyncio

    """Kill the command and everything it started (`sleep` in a script, a pipeline)."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(process.wait(), 5)


def _as_json(text: str | None) -> Any:
    """A JSON observation as its value (Claude Code scripts read `.tool_response.field`)."""
    if text is None:
        return None
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        with contextlib.suppress(ValueError):
            return json.loads(stripped)
    return text


def _jsonable(value: Any) -> bool:
    return isinstance(value, str | int | float | bool | type(None) | list | dict)
