"""The starting agent's hooks on a workflow node's calls: PreToolUse before a tool,
connector, database or MCP node's call runs (a rewrite judged again on a rebuilt view) and
PostToolUse on its result. `NodeContext.guarded` and `guarded_result` are these."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fim.tools.view import ViewError, retargeted
from fim.types import CallView, ToolResult
from fim.workflows.node_types.base import NodeError

if TYPE_CHECKING:
    from fim.workflows.nodes import NodeContext

Rebuild = Callable[[dict[str, Any]], Awaitable[CallView]]
"""The view of a node's call made with the given (call) arguments: how `guarded` judges a
call a hook rewrote."""


async def guarded(
    ctx: NodeContext,
    name: str,
    args: dict[str, Any],
    view: Any = None,
    rebuild: Rebuild | None = None,
) -> tuple[dict[str, Any], Any]:
    """PreToolUse of the starting agent's hooks for a node's call. Returns the
    arguments to run with (a rewrite applied) and the view, or raises NodeError when a
    hook blocks. No guard (a workflow run on its own): the arguments unchanged.

    A hook may rewrite the arguments. The hooks that allowed the old ones then judge
    the rewritten call with its view (target, `access`, SQL) built again by `rebuild`
    from the rewritten arguments, as an agent's call is (`ToolTurn._pre_tool_use`): on
    the old view a `file_ops list` rewritten into a write ran for a read-only agent
    (attack-21 #3). A rewrite to another target is refused, and without `rebuild`
    (a call whose view cannot be built again) a rewrite is blocked: fail closed."""

    view = view or CallView(name, args)
    if ctx.guard is None:
        return args, view
    first: CallView = view
    meta = {"call_id": ctx.next_call_id(), "node": ctx.node_id}

    async def again(target_args: dict[str, Any]) -> CallView:
        """The view of the call the rewritten `target_args` make (raises ViewError)."""
        if rebuild is None:
            raise ViewError("this node's call cannot have its view built again")
        try:
            fresh = await rebuild(first.call_arguments(target_args))
        except ViewError:
            raise
        except Exception as exc:
            raise ViewError(f"{type(exc).__name__}: {exc}") from None
        if fresh.name != first.name:
            raise ViewError(retargeted(first.name, fresh.name))
        return fresh

    async def review(target_args: dict[str, Any]) -> dict[str, Any]:
        return {**(await again(target_args)).metadata, **meta}

    context = first.context("PreToolUse", ctx.workflow, ctx.run_id, meta)
    if getattr(ctx.guard, "reviews", False):  # a HookChain or Stacked: fim.hooks.runner
        pre, events = await ctx.guard.run("PreToolUse", context, review)
    else:
        pre, events = await ctx.guard.run("PreToolUse", context)
    for event in events:
        ctx.emit(event)
    if not pre.allow:
        raise NodeError(f"the call to '{first.name}' was blocked by a hook: {pre.error}")
    if pre.modified_args is not None and pre.modified_args != first.args:
        try:
            view = await again(pre.modified_args)
        except ViewError as exc:
            raise NodeError(
                f"the call to '{first.name}' was blocked: a hook rewrote its arguments and "
                f"fim could not tell what the rewritten call does ({exc}) (hooks fail "
                "closed)"
            ) from None
        args = first.call_arguments(pre.modified_args)
    return args, view


async def guarded_result(ctx: NodeContext, view: Any, result: ToolResult) -> ToolResult:
    """PostToolUse of the starting agent's hooks for a node's result."""
    if ctx.guard is None:
        return result
    meta = {"call_id": ctx._call_id, "node": ctx.node_id, "is_error": result.is_error}
    post, events = await ctx.guard.run(
        "PostToolUse",
        view.context("PostToolUse", ctx.workflow, ctx.run_id, meta, result.content),
    )
    for event in events:
        ctx.emit(event)
    if not post.allow:
        raise NodeError(f"the result of '{view.name}' was withheld by a hook: {post.error}")
    if post.modified_result is not None:
        return ToolResult(content=post.modified_result, is_error=result.is_error)
    return result
