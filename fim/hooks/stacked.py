"""The hooks of a run another run started (a delegate, a workflow an agent started): the
caller's chain and the run's own, each judging what the other let through, so a guard
cannot be sidestepped by delegating.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fim.hooks.runner import MAX_REWRITES, Review, endless_rewrites, reviewed
from fim.types import HookContext, HookPoint, HookResult

if TYPE_CHECKING:
    from fim.events import HookEvent, Notice


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

    reviews = True
    """`run` takes `review=` (see `HookChain.run`)."""

    async def run(
        self, point: HookPoint, context: HookContext, review: Review | None = None
    ) -> tuple[HookResult, list[HookEvent]]:
        """The caller's chain, then the run's own, each on what the other let through. A
        rewrite by either goes to the other to judge: the caller's `readonly_guard` decides
        about the arguments the delegate's hooks leave, not about the model's."""
        args, meta, text = context.tool_args, context.metadata, context.tool_result
        args_changed = text_changed = False
        contexts: list[str] = []
        side_effects: list[str] = []
        events: list[HookEvent] = []
        layers = (self.outer, self.inner)
        settled = [False, False]
        """Whether each chain allowed `args` as they are now."""
        rewrites = 0
        turn = 0
        while not all(settled):
            current = (
                context
                if args is context.tool_args and text is context.tool_result
                else context.model_copy(
                    update={"tool_args": args, "metadata": meta, "tool_result": text}
                )
            )
            result, more = await _run_chain(layers[turn], point, current, review)
            events += more
            if not result.allow:
                if rewrites:
                    note = "judged again: a chain of hooks rewrote the arguments"
                    error = f"{(result.error or 'blocked').rstrip('.')} ({note})"
                    result = result.model_copy(update={"error": error})
                return result, events
            side_effects += result.side_effects
            if result.additional_context:
                contexts.append(result.additional_context)
            if result.modified_result is not None:
                text, text_changed = result.modified_result, True
            new = result.modified_args
            if new is not None and point == "PreToolUse":
                args_changed = True
                if new != args:
                    rewrites += 1
                    fresh = (
                        endless_rewrites(context.tool_name, "the caller's hooks and the run's own")
                        if rewrites > MAX_REWRITES
                        else await reviewed(review, new, context.tool_name)
                    )
                    if isinstance(fresh, str):
                        return HookResult(allow=False, error=fresh, side_effects=side_effects), (
                            events
                        )
                    args, meta = dict(new), fresh if fresh is not None else meta
                    settled = [False, False]
            settled[turn] = True
            turn = 1 - turn
        merged = HookResult(
            modified_args=args if args_changed else None,
            modified_result=text if text_changed else None,
            additional_context="\n\n".join(contexts) or None,
            side_effects=side_effects,
        )
        return merged, events


async def _run_chain(
    runner: Any, point: HookPoint, context: HookContext, review: Review | None
) -> tuple[HookResult, list[HookEvent]]:
    """`runner.run`, handing it `review` when it takes one (a `HookChain`, a `Stacked`)."""
    if review is not None and getattr(runner, "reviews", False):
        result: tuple[HookResult, list[HookEvent]] = await runner.run(point, context, review)
        return result
    plain: tuple[HookResult, list[HookEvent]] = await runner.run(point, context)
    return plain
