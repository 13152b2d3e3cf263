"""How a command hook's answer on exit 0 is read: Claude Code's documented output, decided.

Kept apart from the hook because this is where a hook cannot be argued with: the JSON must
be exactly the documented shape (strict types, no unknown keys or decision words, no
duplicate keys, nothing invisible before it), and anything else blocks the call, naming the
hook and what was wrong. A well-formed answer becomes one `HookResult`: block, rewrite the
arguments, add context, replace the observation, or ask a human.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from fim.hooks.base import HookFailed
from fim.hooks.claude import from_claude, to_claude
from fim.masking import known
from fim.types import HookContext, HookResult

if TYPE_CHECKING:
    from fim.hooks.base import BaseHook

MAX_PLAIN_OUTPUT = 200
"""The most of a hook's plain (non-JSON) output a hook event reports."""


class _Exact(BaseModel):
    """Validators are built on the first answer a hook prints as JSON, not at import:
    `fim validate` builds every command hook but never reads one's output."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


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


async def interpret(
    hook: BaseHook,
    context: HookContext,
    stdout: str,
    *,
    ask_timeout: float,
    files: Path | None = None,
) -> HookResult:
    """The decision in what `hook`'s command printed on exit 0 (an `ask` waits on a human
    for up to `ask_timeout` seconds; an `updatedInput` path under `files` is the
    `file_ops` path relative to it)."""
    text = stdout.strip(" \t\r\n")
    if not text:
        return HookResult()
    lead = text.lstrip("\ufeff\u200b\u200c\u200d\u2060\u00a0")
    if lead != text:
        return refuse(
            hook,
            "printed an invisible character (a byte-order mark or zero-width space) "
            "before its output",
        )
    if not text.startswith(("{", "[")):
        if context.point == "SessionStart":
            return HookResult(additional_context=text)
        # masked whole, then cut: a hook that echoes the tool input before a secret puts
        # the secret where the model's padding says, and a cut there left a piece of it
        shown, cut = known().head(text, MAX_PLAIN_OUTPUT)
        return HookResult(side_effects=[f"output: {shown}" + ("..." if cut else "")])
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        return refuse(
            hook, f"printed invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        )
    except ValueError as exc:
        return refuse(hook, f"printed ambiguous JSON ({exc})")
    if not isinstance(data, dict):
        return refuse(hook, "printed JSON that is not an object")
    try:
        output = HookOutput.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "output"
        return refuse(
            hook, f"printed JSON that is not the documented shape ({where}: {err['msg']})"
        )
    specific = output.hookSpecificOutput
    if specific is not None and specific.hookEventName not in (None, context.point):
        return refuse(
            hook, f"answered hookEventName {specific.hookEventName!r} to a {context.point} event"
        )
    return await _decide(hook, context, output, ask_timeout, files)


def refuse(hook: BaseHook, what: str) -> HookResult:
    """Block the call: `hook` answered `what`, which is not the protocol (fail closed)."""
    return HookFailed(
        error=f"hook '{hook.name}' {what}; the call was blocked because hooks fail closed "
        "(see the README's hook output rules)",
    )


async def _decide(
    hook: BaseHook,
    context: HookContext,
    out: HookOutput,
    ask_timeout: float,
    files: Path | None = None,
) -> HookResult:
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
            return refuse(hook, f"sent updatedInput at {context.point}")
        claude = to_claude(context.tool_name, context.tool_args, context.metadata)
        changes["modified_args"] = (
            from_claude(context.tool_name, updated, context.tool_args, files)
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
            hook,
            context.model_copy(
                update={"tool_args": changes.get("modified_args", context.tool_args)}
            ),
            reason=reason(why, "a hook command asked for confirmation"),
            timeout=ask_timeout,
            asker="hook",
        )
        if not asked.allow:
            return asked
        changes["side_effects"] = [*effects, *asked.side_effects]
    return HookResult(**changes)


def build_validators() -> None:
    """Build the output models' validators now (they are deferred for `fim validate`):
    `fim serve` calls this at start-up, so the first hook answer of a request does not pay."""
    for model in (_Specific, HookOutput):
        model.model_rebuild()
