"""Asking a human: the shared path of the `confirm` builtin and of command hooks that answer
`permissionDecision: "ask"`.

The request is a row in the state store, not a prompt on a terminal, so it can be decided
from another shell (`fim approvals approve ID`) or the HTTP API. An approval is bound to the
call it approves: the run, the DAG step making it (in a DAG run), the tool call id and a
keyed hash of the exact (unmasked) arguments. It never authorises another run, another
step, another call or other arguments — two calls whose secrets mask to the same `***` are
still two different calls — and it allows exactly one call.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from typing import TYPE_CHECKING, Any

from fim.hooks.base import MAX_REASON_CHARS
from fim.hooks.masking import mask_value
from fim.masking import clipped, known
from fim.types import HookContext, HookResult

if TYPE_CHECKING:
    from fim.hooks.base import BaseHook
    from fim.store import Approval, Store


_KEY = secrets.token_bytes(32)
"""Keys the argument hash, so the store never holds a plain hash of a secret argument."""


def call_binding(context: HookContext) -> dict[str, Any]:
    """What an approval is bound to: run, the DAG step that makes the call (`step`, only
    in a DAG run), tool call id, and the keyed hash of the target and its exact arguments.

    A DAG run's steps are parallel ReAct sub-runs sharing the run id, and a model may give
    their calls the same id (`call_0`) and arguments: without the step, a human's approval
    of one step's call let a sibling step's identical call run on it (attack-66)."""
    exact = json.dumps(
        [context.tool_name, context.tool_args or {}],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    digest = hmac.new(_KEY, exact.encode(), hashlib.sha256).hexdigest()
    step = context.metadata.get("step")
    return {
        "run_id": context.run_id,
        **({"step": str(step)} if step else {}),
        "call_id": str(context.metadata.get("call_id") or ""),
        "args_hmac": digest,
    }


def _bound(approval: Approval, binding: dict[str, Any]) -> bool:
    return (
        approval.run_id == binding["run_id"]
        and approval.data.get("step") == binding.get("step")
        and approval.data.get("call_id") == binding["call_id"]
        and hmac.compare_digest(str(approval.data.get("args_hmac", "")), binding["args_hmac"])
    )


async def _find_or_create(
    store: Store,
    hook: BaseHook,
    context: HookContext,
    args: dict[str, Any],
    reason: str,
    timeout: float,
    asker: str,
) -> tuple[str, Approval | None]:
    """An approval to wait on: one already made for this very call (same run, call id and
    arguments: a hook chain asking twice), else a new one."""
    now = time.time()
    binding = call_binding(context)
    for earlier in await store.list_approvals(
        None, agent=context.agent, tool_name=context.tool_name or "", limit=50
    ):
        if earlier.kind != "tool" or not _bound(earlier, binding):
            continue
        if earlier.status == "pending":
            return earlier.id, None
        fresh = earlier.created_at >= now - timeout
        if earlier.status == "approved" and earlier.consumed_at is None and fresh:
            return earlier.id, earlier
    meta = context.metadata
    approval_id = await store.create_approval(
        run_id=context.run_id,
        agent=context.agent,
        tool_name=context.tool_name or "",
        args=args,
        reason=reason,
        expires_at=now + timeout,
        kind="tool",
        data={
            **binding,
            "hook": hook.name,
            "asker": asker,
            **{k: meta[k] for k in ("connector", "action", "access") if k in meta},
        },
    )
    args_text = json.dumps(args, ensure_ascii=False, default=str)
    step = f" (step {known().text(binding['step'])})" if "step" in binding else ""  # model's
    hook.notice(
        f"approval {approval_id} needed: agent '{context.agent}'{step} wants to call "
        f"{context.tool_name} {preview(args_text, 300)} ({reason}). Approve with "
        f"`fim approvals approve {approval_id}` or deny with `fim approvals deny "
        f"{approval_id}` within {timeout:g}s.",
        approval_id=approval_id,
        tool_name=context.tool_name,
    )
    return approval_id, None


def preview(text: str, limit: int) -> str:
    """`text` whole when it fits in `limit` characters, else its head and its tail around
    how much is not shown, each masked before it is cut. A human approves what the call's
    arguments say: a payload a model puts after harmless-looking text must not fall off the
    end of the prompt."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    hidden = len(text) - head - tail
    masker = known()  # masked whole, then cut: a cut never leaves a piece of a secret
    return (
        f"{masker.head(text, head)[0]} ... [{hidden} characters not shown: `fim approvals "
        f"list --json` shows them] ... {masker.tail(text, tail)[0]}"
    )


NOBODY_ASKED = "nobody_asked"
"""The key of an approval's `data` set true when it was denied because no human could be
asked (`fim run` without a terminal): its block message must not say a reviewer denied it."""


async def ask_human(
    hook: BaseHook,
    context: HookContext,
    *,
    reason: str,
    timeout: float,
    poll: float = 0.25,
    asker: str = "confirm",
) -> HookResult:
    """Wait for a human to approve this call; allow on approval, block on denial or expiry.
    `asker` (`confirm`, or `hook` for a hook's `permissionDecision: "ask"`) is recorded
    as the approval's `data.asker`: `fim run` words its question by it, showing a hook's own
    reason on the prompt as Claude Code does."""
    run = hook.run_context
    if run is None:
        raise RuntimeError(f"hook '{hook.name}' needs a run to ask for approval (state store)")
    # deferred: loading fim.store costs tens of ms
    from fim.store import get_store

    store = get_store(run.services)
    reason = clipped(reason, MAX_REASON_CHARS, "reason")  # a hook's, stored and shown
    args = mask_value(context.tool_args or {}, run.snapshot.mask)
    tool = context.tool_name
    approval_id, approval = await _find_or_create(
        store, hook, context, args, reason, timeout, asker
    )
    if approval is None:  # waits until decided or expired (its deadline ends the wait), and
        # withdraws it if the run stops waiting first: nothing awaited between the two
        approval = await store.wait_approval(approval_id, timeout + 0.05, poll=poll)

    if approval is not None and approval.status == "approved":
        if not _bound(approval, call_binding(context)):
            return HookResult(
                allow=False,
                error=f"approval {approval_id} was given for another call; it cannot "
                f"authorise this call to '{tool}'",
            )
        if await store.consume_approval(approval_id):
            return HookResult(
                side_effects=[f"approval {approval_id} approved by {approval.resolved_by}"]
            )
        return HookResult(
            allow=False,
            error=f"approval {approval_id} for '{tool}' was already used by another call; "
            "each approval allows one call, so a new request is needed",
            side_effects=[f"approval {approval_id} already used"],
        )
    if approval is not None and approval.status == "denied" and approval.data.get(NOBODY_ASKED):
        return HookResult(
            allow=False,
            error=f"the call to '{tool}' was denied: "
            f"{approval.data.get('note') or 'nobody could be asked'}. Do not retry the same "
            "call; tell the user it needs approval",
            side_effects=[f"approval {approval_id} denied by {approval.resolved_by}"],
        )
    if approval is not None and approval.status == "denied":
        note = approval.data.get("note")
        return HookResult(
            allow=False,
            error=f"a human reviewer denied the call to '{tool}'"
            + (f" with the note: {note}" if note else "")
            + ". Do not retry the same call; tell the user it was denied or ask them how "
            "to proceed",
            side_effects=[f"approval {approval_id} denied by {approval.resolved_by}"],
        )
    return HookResult(
        allow=False,
        error=f"no human approved the call to '{tool}' within {timeout:g}s (approval "
        f"{approval_id} expired), so it did not run. Do not retry the same call; tell the "
        "user it needs approval (`fim approvals list`)",
        side_effects=[f"approval {approval_id} expired"],
    )
