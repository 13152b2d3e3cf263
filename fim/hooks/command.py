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
- any other exit code, a timeout, or stdout that starts like JSON but does not parse:
  block, saying why (hooks fail closed; Claude Code would let these through).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fim.hooks.base import BaseHook

if TYPE_CHECKING:
    import asyncio
from fim.types import HookContext, HookPoint, HookResult

_PERMISSION_DECISIONS = ("allow", "deny", "ask")


class CommandOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ask_timeout: float = Field(default=300.0, gt=0)
    """Seconds a human has to decide when the command answers `permissionDecision: ask`."""


class CommandHook(BaseHook):
    """Runs `command` through the shell in the project root for each matching event."""

    Options: ClassVar[type[BaseModel]] = CommandOptions

    def __init__(self, command: str, event: HookPoint, **options: Any) -> None:
        super().__init__(**options)
        self.command = command
        self.event: HookPoint = event

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
            "cwd": root,
            "permission_mode": "default",
            "hook_event_name": context.point,
        }
        if context.point == "SessionStart":
            data["source"] = "startup"
        else:
            data["tool_name"] = context.tool_name
            data["tool_input"] = context.tool_args or {}
            if context.metadata.get("call_id"):
                data["tool_use_id"] = context.metadata["call_id"]
        if context.point == "PostToolUse":
            data["tool_response"] = _as_json(context.tool_result)
        data["fim"] = {
            "agent": context.agent,
            "metadata": {k: v for k, v in context.metadata.items() if _jsonable(v)},
        }
        return data

    def _root(self) -> str:
        if self.run_context is not None:
            return str(self.run_context.snapshot.root)
        return os.getcwd()

    async def __call__(self, context: HookContext) -> HookResult:
        code, stdout, stderr = await self._execute(json.dumps(self.payload(context), default=str))
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
        return await self._interpret(context, stdout.strip())

    async def _execute(self, stdin: str) -> tuple[int | None, str, str]:
        """Exit code (None on timeout), stdout and stderr of one run of the command."""
        import asyncio  # here, not at import: the compiler's hook check loads this module

        env = dict(os.environ)
        root = self._root()
        env["CLAUDE_PROJECT_DIR"] = root
        env["FIM_PROJECT_DIR"] = root
        process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=root,
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
        if not stdout:
            return HookResult()
        if not stdout.startswith(("{", "[")):
            if context.point == "SessionStart":
                return HookResult(additional_context=stdout)
            return HookResult(side_effects=[f"output: {stdout[:200]}"])
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError as exc:
            return HookResult(
                allow=False,
                error=f"hook command printed invalid JSON ({exc.msg} at line {exc.lineno} "
                f"column {exc.colno}); the call was blocked because hooks fail closed",
            )
        if not isinstance(data, dict):
            return HookResult(
                allow=False,
                error="hook command printed JSON that is not an object; the call was "
                "blocked because hooks fail closed",
            )
        return await self._decide(context, data)

    async def _decide(self, context: HookContext, data: dict[str, Any]) -> HookResult:
        specific = data.get("hookSpecificOutput") or {}
        if not isinstance(specific, dict):
            specific = {}
        effects = [f"message: {data['systemMessage']}"] if data.get("systemMessage") else []
        if data.get("continue") is False:
            reason = data.get("stopReason") or "the hook command asked to stop"
            return HookResult(allow=False, error=str(reason), side_effects=effects)
        permission = specific.get("permissionDecision")
        why = specific.get("permissionDecisionReason") or data.get("reason")
        if permission is not None and permission not in _PERMISSION_DECISIONS:
            return HookResult(
                allow=False,
                error=f"hook command answered permissionDecision {permission!r} (valid: "
                "allow, deny, ask); the call was blocked because hooks fail closed",
            )
        if permission == "deny" or data.get("decision") == "block":
            return HookResult(
                allow=False,
                error=str(why or "blocked by a hook command without a reason"),
                side_effects=effects,
            )
        changes: dict[str, Any] = {"side_effects": effects}
        updated = specific.get("updatedInput", data.get("updatedInput"))
        if updated is not None:
            if not isinstance(updated, dict):
                return HookResult(
                    allow=False,
                    error="hook command sent updatedInput that is not an object; the call "
                    "was blocked because hooks fail closed",
                )
            changes["modified_args"] = updated
        extra = specific.get("additionalContext", data.get("additionalContext"))
        if context.point == "PostToolUse":
            replaced = specific.get("updatedMCPToolOutput")
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
            from fim.hooks.approval import ask_human

            asked = await ask_human(
                self,
                context.model_copy(
                    update={"tool_args": changes.get("modified_args", context.tool_args)}
                ),
                reason=str(why or "a hook command asked for confirmation"),
                timeout=self.options.ask_timeout,
            )
            if not asked.allow:
                return asked
            changes["side_effects"] = [*effects, *asked.side_effects]
        return HookResult(**changes)


async def _kill(process: asyncio.subprocess.Process) -> None:
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
