"""A case run's tool calls as its trajectory checks see them, with what became of each
(newcomer55 #3, #9): the call the model made, the tool it really ran (a meta-tool's
target), whether a PreToolUse hook blocked it and which, and its result or error.

Decided: a call a hook blocked is still a call: the model asked for it, and a trajectory
check is about what the model did. `tool_not_called` counts it, saying which hook blocked
it (`called 1x (blocked by guards:RefundLimit)`); `tool_blocked: NAME` asserts the guard
held, and `tool_called: {name, blocked: false}` asks for a call that ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fim.config.schema.eval_trajectory import SequenceCall, ToolCalledSpec, ToolSequenceSpec
from fim.eval.outcomes import Observed, Outcome, clip, subset
from fim.events import HookEvent, ToolCallEvent, ToolResultEvent
from fim.masking import known

RESULT_CHARS = 2000
"""How much of a call's result (or error) a `python:` check's context holds."""


@dataclass
class Call:
    event: ToolCallEvent
    blocked_by: str | None = None
    """The PreToolUse hook that blocked the call (it never ran), or None."""
    result: str | None = None
    """What the call returned (masked, as the trace shows it), when it ran without error."""
    error: str | None = None
    """Why the call failed or was not run (the block's reason too), or None."""

    def matches(self, name: str, args: dict[str, Any]) -> bool:
        """A call of `name` with at least `args`: the tool the model called (`connector`,
        with its own arguments) or the one it really ran (`crm__get_order`, with the
        action's parameters), so an assertion reads the same in both tool modes."""
        call = self.event
        if call.name == name and subset(args, call.arguments):
            return True
        return call.target == name and subset(args, call.target_arguments or {})

    def shown(self, with_args: bool = False) -> str:
        """`lookup_order`, `connector (shipping__track)`, with the arguments when asked
        (`lookup_order {"order_id": "A1001"}`), and `[blocked by guards:RefundLimit]`."""
        call = self.event
        text = call.name + (f" {clip(_json(call.arguments), 200)}" if with_args else "")
        if call.target:
            inner = f" {clip(_json(call.target_arguments or {}), 200)}" if with_args else ""
            text += f" ({call.target}{inner})"
        return text + (f" [blocked by {self.blocked_by}]" if self.blocked_by else "")

    def as_context(self) -> dict[str, Any]:
        """The call as a `python:` check's `context["tool_calls"]` item."""
        call = self.event
        return {
            "name": call.name,
            "arguments": dict(call.arguments or {}),
            "target": call.target or call.name,
            "target_arguments": dict(
                (call.target_arguments if call.target else call.arguments) or {}
            ),
            "blocked_by": self.blocked_by,
            "result": _capped(self.result),
            "error": _capped(self.error),
        }


def calls_of(seen: Observed) -> list[Call]:
    """Every tool call of the run, in the order the model made them, with its fate."""
    calls = {e.call_id: Call(e) for e in seen.events if isinstance(e, ToolCallEvent)}
    for event in seen.events:
        found = calls.get(getattr(event, "call_id", None) or "")
        if found is None:
            continue
        if isinstance(event, HookEvent) and event.point == "PreToolUse":
            if event.decision == "block" and found.blocked_by is None:
                found.blocked_by = event.hook
        elif isinstance(event, ToolResultEvent):
            if event.is_error or found.blocked_by is not None:
                found.error = event.content
            else:
                found.result = event.content
    return list(calls.values())


def _capped(text: str | None) -> str | None:
    if text is None or len(text) <= RESULT_CHARS:
        return text
    return known().head(text, RESULT_CHARS - 1)[0] + "…"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _args(args: dict[str, Any]) -> str:
    return f" with {json.dumps(args, ensure_ascii=False, default=str)}" if args else ""


def _listing(calls: list[Call], with_args: bool) -> str:
    return ", ".join(c.shown(with_args) for c in calls) or "no tools"


def check_called(spec: ToolCalledSpec, seen: Observed) -> Outcome:
    calls = calls_of(seen)
    matching = [c for c in calls if c.matches(spec.name, spec.args)]
    if spec.blocked is not None:
        matching = [c for c in matching if (c.blocked_by is not None) == spec.blocked]
    fate = {None: "", True: " blocked by a hook", False: " that ran"}[spec.blocked]
    names = _listing(calls, bool(spec.args))
    wanted = f"{spec.name}{_args(spec.args)}"
    if spec.times is not None:
        return Outcome(
            "tool_called",
            len(matching) == spec.times,
            f"expected {wanted} {spec.times}x{fate}, called {len(matching)}x (calls: {names})"
            + _no_hooks(seen, spec.blocked is True and not matching),
        )
    return Outcome(
        "tool_called",
        bool(matching),
        f"expected a call to {wanted}{fate}; calls: {names}"
        + _no_hooks(seen, spec.blocked is True and not matching),
    )


def check_not_called(name: str, seen: Observed) -> Outcome:
    matching = [c for c in calls_of(seen) if c.matches(name, {})]
    hooks = sorted({c.blocked_by for c in matching if c.blocked_by})
    blocked = sum(1 for c in matching if c.blocked_by)
    said = f"expected no call to {name}, called {len(matching)}x"
    if hooks:
        which = ", ".join(hooks)
        said += (
            f" (blocked by {which})"
            if blocked == len(matching)
            else f" ({blocked} blocked by {which})"
        )
        said += "; a blocked call is still a call: `tool_blocked: NAME` asserts the guard held"
    return Outcome("tool_not_called", not matching, said)


def check_blocked(name: str, seen: Observed) -> Outcome:
    calls = calls_of(seen)
    matching = [c for c in calls if c.matches(name, {})]
    held = [c for c in matching if c.blocked_by]
    if held:
        by = ", ".join(sorted({c.blocked_by or "" for c in held}))
        return Outcome("tool_blocked", True, f"{name} blocked by {by}")
    if matching:
        said = f"expected a hook to block {name}; it ran {len(matching)}x (calls: "
        said += f"{_listing(calls, True)})"
    else:
        said = f"expected a blocked call to {name}; no call to it (calls: {_listing(calls, False)})"
    return Outcome("tool_blocked", False, said + _no_hooks(seen, True))


def _no_hooks(seen: Observed, missing: bool) -> str:
    """Why no call could have been blocked: no hook ran at all in the case."""
    if not missing or any(isinstance(e, HookEvent) for e in seen.events):
        return ""
    return (
        " (no hook ran in this case: run its suite with hooks, `hooks: on` in the suite "
        "or `fim eval --with-hooks`)"
    )


def check_sequence(spec: ToolSequenceSpec, seen: Observed) -> Outcome:
    calls = calls_of(seen)
    wanted = spec.expected
    with_args = any(w.args for w in wanted)
    if spec.mode == "exact":
        ok = len(calls) == len(wanted) and all(
            c.matches(w.name, w.args) for c, w in zip(calls, wanted, strict=False)
        )
        missing = [] if ok else _first_unmatched_in_order(calls, wanted)
    elif spec.mode == "in_order":
        missing = _first_unmatched_in_order(calls, wanted)
        ok = not missing
    else:
        missing = _unmatched_any_order(calls, wanted)
        ok = not missing
    expected = (
        [f"{w.name}{_args(w.args)}" for w in wanted] if with_args else [w.name for w in wanted]
    )
    said = f"expected {spec.mode} sequence {expected}, got [{_listing(calls, with_args)}]"
    if missing:
        said += f"; not found: {', '.join(f'{w.name}{_args(w.args)}' for w in missing)}"
    elif not ok:
        said += f"; {len(calls)} calls, {len(wanted)} expected"
    return Outcome("tool_sequence", ok, said)


def _first_unmatched_in_order(calls: list[Call], wanted: list[SequenceCall]) -> list[SequenceCall]:
    """The expected calls from the first one not found after its predecessors, or []."""
    position = 0
    for index, want in enumerate(wanted):
        while position < len(calls) and not calls[position].matches(want.name, want.args):
            position += 1
        if position == len(calls):
            return wanted[index:]
        position += 1
    return []


def _unmatched_any_order(calls: list[Call], wanted: list[SequenceCall]) -> list[SequenceCall]:
    """The expected calls no distinct call matches, in any order (a bipartite matching: a
    call matches one expectation only, and `{name: a}` must not take the call that the
    more specific `{name: a, args: ...}` needs)."""
    owner: dict[int, int] = {}

    def place(w: int, tried: set[int]) -> bool:
        for c, call in enumerate(calls):
            if c in tried or not call.matches(wanted[w].name, wanted[w].args):
                continue
            tried.add(c)
            if c not in owner or place(owner[c], tried):
                owner[c] = w
                return True
        return False

    placed = {w for w in range(len(wanted)) if place(w, set())}
    return [w for i, w in enumerate(wanted) if i not in placed]


__all__ = [
    "Call",
    "calls_of",
    "check_blocked",
    "check_called",
    "check_not_called",
    "check_sequence",
]
