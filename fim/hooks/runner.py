"""The hook chain of one run: ordering, chaining, fail-closed execution and trace events.

The engine asks one question per point ("may this go on, and with what?") and gets one
merged answer plus an event per hook, so the trace shows exactly which hook decided what.
Every way a hook can go wrong (raise, hang, return garbage) becomes a block with the
reason in the event: a guard that silently stops guarding is worse than none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fim.events import HookEvent
from fim.hooks.base import BaseHook, log
from fim.hooks.claude import names_of
from fim.types import HookContext, HookPoint, HookResult

if TYPE_CHECKING:
    from fim.events import Notice


def _identity(text: str) -> str:
    return text


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

    async def run(
        self, point: HookPoint, context: HookContext
    ) -> tuple[HookResult, list[HookEvent]]:
        args = dict(context.tool_args) if context.tool_args is not None else None
        result_text = context.tool_result
        args_changed = result_changed = False
        contexts: list[str] = []
        side_effects: list[str] = []
        events: list[HookEvent] = []
        blocked: str | None = None
        names = names_of(context.tool_name, context.tool_args, context.metadata)
        matching = [
            h
            for h in self.for_point(point)
            if (not names and h.matches(None)) or any(h.matches(n) for n in names)
        ]

        for hook in matching:
            current = context.model_copy(
                update={
                    "point": point,
                    "tool_args": dict(args) if args is not None else None,
                    "tool_result": result_text,
                    "metadata": dict(context.metadata),
                }
            )
            result = await self._call(hook, current)
            if not result.allow and point == "SessionStart" and hook.optional:
                skipped = f"optional hook failed, the session starts without it: {result.error}"
                events.append(self._event(hook, point, context, "allow", skipped, result))
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
                events.append(self._event(hook, point, context, "block", blocked, result))
                side_effects.extend(result.side_effects)
                break
            decision = "allow"
            reason: str | None = None
            if point == "PreToolUse" and result.modified_args is not None:
                args, args_changed = dict(result.modified_args), True
                decision, reason = "modify", "rewrote the arguments"
            if point == "PostToolUse" and result.modified_result is not None:
                result_text, result_changed = result.modified_result, True
                decision, reason = "modify", "rewrote the result"
            if result.additional_context:
                contexts.append(result.additional_context)
                if decision == "allow":
                    decision, reason = "context", "added context"
            side_effects.extend(result.side_effects)
            events.append(self._event(hook, point, context, decision, reason, result))

        merged = HookResult(
            allow=blocked is None,
            error=self.mask(blocked) if blocked is not None else None,
            modified_args=args if args_changed and blocked is None else None,
            modified_result=result_text if result_changed and blocked is None else None,
            additional_context="\n\n".join(contexts) or None,
            side_effects=side_effects,
        )
        final = context.model_copy(
            update={"point": point, "tool_args": args, "tool_result": result_text}
        )
        # Every matching hook hears the outcome, also those the chain never reached, so an
        # audit hook records calls another hook blocked before it.
        for hook in matching:
            failure = await self._finish(hook, final, merged)
            if failure is not None and merged.allow:
                events.append(self._event(hook, point, context, "block", failure, None))
                merged = HookResult(
                    allow=False, error=self.mask(failure), side_effects=side_effects
                )
        return merged, events

    async def _call(self, hook: BaseHook, context: HookContext) -> HookResult:
        timeout = hook.chain_timeout()
        try:
            result: Any = await asyncio.wait_for(_contained(lambda: hook(context)), timeout)
        except TimeoutError:
            return HookResult(
                allow=False,
                error=f"hook '{hook.name}' timed out after {timeout:g}s, so the call was "
                "blocked (hooks fail closed)",
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("hook %s raised", hook.name, exc_info=True)
            return HookResult(
                allow=False,
                error=f"hook '{hook.name}' failed ({type(exc).__name__}: {exc}), so the call "
                "was blocked (hooks fail closed)",
            )
        if not isinstance(result, HookResult):
            return HookResult(
                allow=False,
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
            return (
                f"hook '{hook.name}' failed while finishing ({type(exc).__name__}: {exc}), "
                "so the call was blocked (hooks fail closed)"
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
        return HookEvent(
            run_id=context.run_id,
            hook=self.mask(hook.name),
            point=point,
            decision=decision,  # type: ignore[arg-type]
            tool_name=context.tool_name,
            reason=self.mask(reason) if reason else None,
            side_effects=[self.mask(s) for s in (result.side_effects if result else [])],
        )


class Stacked:
    """The hooks of a run started by another run (a delegate, a workflow an agent started):
    the caller's chain first, then the run's own. A guard cannot be sidestepped by
    delegating; a rewrite by the outer chain is what the inner one sees."""

    def __init__(self, outer: Any, inner: Any) -> None:
        self.outer = outer
        self.inner = inner

    @property
    def on_notice(self) -> Callable[[Notice], None] | None:
        return getattr(self.inner, "on_notice", None)

    @on_notice.setter
    def on_notice(self, value: Callable[[Notice], None] | None) -> None:
        for chain in (self.outer, self.inner):
            if hasattr(chain, "on_notice"):
                chain.on_notice = value

    async def run(
        self, point: HookPoint, context: HookContext
    ) -> tuple[HookResult, list[HookEvent]]:
        first, events = await self.outer.run(point, context)
        if not first.allow:
            return first, events
        update: dict[str, Any] = {}
        if first.modified_args is not None:
            update["tool_args"] = first.modified_args
        if first.modified_result is not None:
            update["tool_result"] = first.modified_result
        second, more = await self.inner.run(point, context.model_copy(update=update))
        if not second.allow:
            return second, events + more
        merged = HookResult(
            modified_args=second.modified_args
            if second.modified_args is not None
            else first.modified_args,
            modified_result=second.modified_result
            if second.modified_result is not None
            else first.modified_result,
            additional_context="\n\n".join(
                c for c in (first.additional_context, second.additional_context) if c
            )
            or None,
            side_effects=[*first.side_effects, *second.side_effects],
        )
        return merged, events + more
