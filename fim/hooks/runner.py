"""The hook chain of one run: ordering, chaining, fail-closed execution and trace events.

The engine asks one question per point ("may this go on, and with what?") and gets one
merged answer plus an event per hook, so the trace shows exactly which hook decided what.
Every way a hook can go wrong (raise, hang, return garbage) becomes a block with the
reason in the event: a guard that silently stops guarding is worse than none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from fim.events import HookEvent
from fim.hooks.base import MAX_REASON_CHARS, BaseHook, HookFailed, log
from fim.hooks.claude import names_of
from fim.masking import clipped
from fim.project_frames import described
from fim.tools.registry import MAX_OBSERVATION_CHARS
from fim.types import HookContext, HookPoint, HookResult

if TYPE_CHECKING:
    from fim.events import Notice


def _identity(text: str) -> str:
    return text


Review = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""What a call is once a hook rewrote its arguments: given the rewritten target arguments,
the metadata of the call they make (`access`, `sql`, the connector...), computed again by
the engine from those arguments (`view_of`). Raises when the rewritten call cannot be told
or targets something else; the call is then blocked."""

MAX_REWRITES = 8
"""Rewrites of one call's arguments accepted. A rewrite sends the call back to the hooks
that judged the old arguments; a caller's chain and a delegate's that undo each other's
rewrite would loop forever, so past this many the call is blocked (fail closed)."""


class HookExited(Exception):
    """A hook called `sys.exit()` (Claude Code scripts block with `sys.exit(2)`)."""


async def _contained(call: Callable[[], Any]) -> Any:
    """Await a hook's coroutine with `SystemExit` turned into an ordinary failure. asyncio
    re-raises SystemExit out of the event loop from the task it happens in, so caught any
    later it would already have stopped the server; here it becomes a block like any other
    exception."""
    try:
        return await call()
    except SystemExit as exc:
        raise HookExited(f"the hook called sys.exit({exc.code!r})") from None


async def reviewed(
    review: Review | None, args: dict[str, Any], tool: str | None
) -> dict[str, Any] | str | None:
    """The metadata of the call `args` make, or why it cannot be told (a block reason).
    None without a `review` (a runner driven by hand, a workflow node): the metadata is
    kept, and the hooks judge the rewritten arguments with it."""
    if review is None:
        return None
    try:
        return await review(args)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return (
            f"a hook rewrote the arguments of '{tool}' and fim could not tell what the "
            f"rewritten call does ({exc}), so it was blocked (hooks fail closed)"
        )


def _rewritten_by(rewriters: list[str]) -> str:
    return f"judged again: hook '{rewriters[-1]}' rewrote the arguments"


def endless_rewrites(tool: str | None, who: str) -> str:
    return (
        f"{who} kept rewriting the arguments of '{tool}' (more than {MAX_REWRITES} rewrites), "
        "so the call was blocked (hooks fail closed): each rewrite is judged again by the "
        "hooks before it, and no arguments were reached that every hook leaves as they are"
    )


class HookChain:
    """Implements `fim.types.HookRunner` over hooks sorted by priority (stable)."""

    def __init__(
        self,
        hooks: Sequence[BaseHook],
        *,
        mask: Callable[[str], str] = _identity,
        on_notice: Callable[[Notice], None] | None = None,
    ) -> None:
        self.hooks = sorted(hooks, key=lambda h: h.priority)
        self.mask = mask
        self.on_notice = on_notice
        """Set by a surface that wants live notices (a pending approval) during a hook."""
        for hook in self.hooks:
            hook._notify = self._notify

    def _notify(self, notice: Notice) -> None:
        if self.on_notice is not None:
            self.on_notice(notice)

    def for_point(self, point: HookPoint) -> list[BaseHook]:
        return [h for h in self.hooks if point in h.points]

    reviews = True
    """`run` takes `review=`: the engine hands it the view of a rewritten call."""

    async def run(
        self, point: HookPoint, context: HookContext, review: Review | None = None
    ) -> tuple[HookResult, list[HookEvent]]:
        """The chain's merged answer at `point`. At PreToolUse the answer holds for the
        arguments that will run: when a hook rewrites them, every hook before it that
        allowed the old arguments as they were (a guard: `readonly_guard`, `confirm`, a
        policy script) runs again on the rewritten call, with its metadata computed afresh
        by `review` (a rewrite may turn a read into a write). A hook that rewrote the call
        has had its say (its output is what it asks to run) and is not run again, so a
        chain of rewriting hooks that are not idempotent still ends."""
        args = dict(context.tool_args) if context.tool_args is not None else None
        meta = context.metadata
        result_text = context.tool_result
        args_changed = result_changed = False
        contexts: list[str] = []
        side_effects: list[str] = []
        events: list[HookEvent] = []
        blocked: str | None = None
        names = names_of(context.tool_name, context.tool_args, context.metadata)
        if point == "SessionStart" and context.metadata.get("source"):
            names = [context.metadata["source"]]  # as Claude Code matches: `startup|resume`
        matching = [
            h
            for h in self.for_point(point)
            if (not names and h.matches(None)) or any(h.matches(n) for n in names)
        ]
        judged: list[dict[str, Any] | None] = [None] * len(matching)
        """The arguments each hook last allowed as they were (None: not run yet)."""
        rewrote: set[int] = set()
        """The hooks that rewrote this call: not run again."""
        rewriters: list[str] = []
        """The hooks that rewrote the arguments, in order (for the trace and a block)."""

        index = 0
        while index < len(matching):
            hook = matching[index]
            again = judged[index] is not None
            if index in rewrote or (again and judged[index] == args):
                index += 1  # allowed these very arguments already, or wrote them
                continue
            current = context.model_copy(
                update={
                    "point": point,
                    "tool_args": dict(args) if args is not None else None,
                    "tool_result": result_text,
                    "metadata": dict(meta),
                }
            )
            result = await self._call(hook, current)
            if not result.allow and point == "SessionStart" and hook.optional:
                skipped = f"optional hook failed, the session starts without it: {result.error}"
                events.append(self._event(hook, point, context, "allow", skipped, result))
                index += 1
                continue
            if (
                not result.allow
                and point == "SessionStart"
                and "fail closed" in (result.error or "")
            ):
                result = result.model_copy(
                    update={
                        "error": f"SessionStart hook '{hook.name}' failed: {result.error}. If "
                        "the session can do without it, declare the hook with `optional: true`"
                    }
                )
            if not result.allow:
                blocked = result.error or f"hook '{hook.name}' blocked without giving a reason"
                if again:
                    blocked = f"{blocked.rstrip('.')} ({_rewritten_by(rewriters)})"
                events.append(self._event(hook, point, context, "block", blocked, result))
                side_effects.extend(result.side_effects)
                break
            decision = "allow"
            reason: str | None = _rewritten_by(rewriters) if again else None
            restart = False
            if point == "PreToolUse" and result.modified_args is not None:
                new = dict(result.modified_args)
                decision, reason = "modify", "rewrote the arguments"
                if new != args:
                    args, args_changed = new, True
                    rewriters.append(hook.name)
                    rewrote.add(index)
                    if len(rewriters) > MAX_REWRITES:
                        who = "', '".join(dict.fromkeys(rewriters[-4:]))
                        blocked = endless_rewrites(context.tool_name, f"hooks '{who}'")
                        events.append(self._event(hook, point, context, "block", blocked, None))
                        break
                    fresh = await reviewed(review, new, context.tool_name)
                    if isinstance(fresh, str):
                        blocked = fresh
                        events.append(self._event(hook, point, context, "block", blocked, None))
                        break
                    meta = fresh if fresh is not None else meta
                    restart = any(judged[j] is not None for j in range(index))
                else:
                    args_changed = True
            if point == "PostToolUse" and result.modified_result is not None:
                result_text, result_changed = result.modified_result, True
                decision, reason = "modify", "rewrote the result"
            if result.additional_context:
                contexts.append(result.additional_context)
                if decision == "allow" and not again:
                    decision, reason = "context", "added context"
            side_effects.extend(result.side_effects)
            events.append(self._event(hook, point, context, decision, reason, result))
            judged[index] = args if args is not None else {}
            index = 0 if restart else index + 1

        merged = HookResult(
            allow=blocked is None,
            error=self.mask(blocked) if blocked is not None else None,
            modified_args=args if args_changed and blocked is None else None,
            modified_result=result_text if result_changed and blocked is None else None,
            additional_context="\n\n".join(contexts) or None,
            side_effects=side_effects,
        )
        final = context.model_copy(
            update={"point": point, "tool_args": args, "tool_result": result_text, "metadata": meta}
        )
        # Every matching hook hears the outcome, also those the chain never reached, so an
        # audit hook records calls another hook blocked before it.
        for hook in matching:
            failure = await self._finish(hook, final, merged)
            if failure is not None and merged.allow:
                failed = HookFailed(error=failure)
                events.append(self._event(hook, point, context, "block", failure, failed))
                merged = HookResult(
                    allow=False, error=self.mask(failure), side_effects=side_effects
                )
        return merged, events

    async def _call(self, hook: BaseHook, context: HookContext) -> HookResult:
        return _bounded(await self._ask(hook, context))

    async def _ask(self, hook: BaseHook, context: HookContext) -> HookResult:
        timeout = hook.chain_timeout()
        try:
            result: Any = await asyncio.wait_for(_contained(lambda: hook(context)), timeout)
        except TimeoutError:
            return HookFailed(
                error=f"hook '{hook.name}' timed out after {timeout:g}s, so the call was "
                "blocked (hooks fail closed)",
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("hook %s raised", hook.name, exc_info=True)
            ctx = hook.run_context  # a Python hook's frames are the project's: kept apart
            where = described(exc, ctx.snapshot.root if ctx is not None else None)
            return _Raised(
                allow=False,
                error=f"hook '{hook.name}' failed ({type(exc).__name__}: {exc}), so the call "
                "was blocked (hooks fail closed)",
                at=where.at if where else None,
                traceback=where.traceback if where else None,
            )
        if not isinstance(result, HookResult):
            return HookFailed(
                error=f"hook '{hook.name}' returned {type(result).__name__} instead of a "
                "HookResult, so the call was blocked (hooks fail closed)",
            )
        return result

    async def _finish(self, hook: BaseHook, context: HookContext, merged: HookResult) -> str | None:
        try:
            await asyncio.wait_for(_contained(lambda: hook.finish(context, merged)), hook.timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return clipped(
                f"hook '{hook.name}' failed while finishing ({type(exc).__name__}: {exc}), "
                "so the call was blocked (hooks fail closed)",
                MAX_REASON_CHARS,
                "reason",
            )
        return None

    def _event(
        self,
        hook: BaseHook,
        point: HookPoint,
        context: HookContext,
        decision: str,
        reason: str | None,
        result: HookResult | None,
    ) -> HookEvent:
        where: dict[str, Any] = {}
        if isinstance(result, _Raised) and result.at is not None:  # for the developer only
            where = {"at": self.mask(result.at), "traceback": self.mask(result.traceback or "")}
        failed = decision == "block" and isinstance(result, HookFailed)
        if failed:  # the operator's to fix, not the policy's decision (newcomer-52 #2)
            log.warning(
                "run %s: hook '%s' failed at %s%s: %s",
                context.run_id, self.mask(hook.name), point,
                f" of '{context.tool_name}'" if context.tool_name else "", self.mask(reason or ""),
                extra={"hook_failure": True},  # `fim run` says it itself, once a hook
            )  # fmt: skip
        return HookEvent(
            run_id=context.run_id,
            hook=self.mask(hook.name),
            point=point,
            decision=decision,  # type: ignore[arg-type]
            tool_name=context.tool_name,
            reason=self.mask(reason) if reason else None,
            side_effects=[self.mask(s) for s in (result.side_effects if result else [])],
            failed=failed,
            **where,
        )


class _Raised(HookFailed):
    """The block of a hook that raised, with where in the project's code (`at`,
    `traceback`: `fim.project_frames`) for its event; the model reads `error` only."""

    at: str | None = None
    traceback: str | None = None


def _bounded(result: HookResult) -> HookResult:
    """`result` with every text it passes on bounded (`clipped`): whatever kind of hook
    wrote it (a command's stderr or JSON, a Python hook's `block()`), a blocked call's
    observation is no larger than a tool result's."""
    update: dict[str, Any] = {}
    if result.error is not None and len(result.error) > MAX_REASON_CHARS:
        update["error"] = clipped(result.error, MAX_REASON_CHARS, "reason")
    for field in ("modified_result", "additional_context"):
        text = getattr(result, field)
        if isinstance(text, str) and len(text) > MAX_OBSERVATION_CHARS:
            update[field] = clipped(text, MAX_OBSERVATION_CHARS, "hook's text")
    if any(len(s) > MAX_REASON_CHARS for s in result.side_effects):
        update["side_effects"] = [clipped(s, MAX_REASON_CHARS, "note") for s in result.side_effects]
    return result.model_copy(update=update) if update else result
