"""The one place that decides what hooks see of a tool call (the hook view).

Every route to a capability — a legacy tool, the `connector`/`database`/`mcp` meta-tools,
a tool loaded by `request_tools`, a workflow node — asks `view_of(tool, args)`. A tool whose
call targets something else (a meta-tool) puts a resolver under `metadata["call_view"]`
that returns a `CallView` of the real target and its own arguments.

A resolver that fails, or answers with anything but a `CallView`, raises `ViewError`:
callers block the call (fail closed) rather than show hooks the wrapper.

A view is built on the event loop. A tool whose view needs untrusted work (parsing the
model's SQL) puts an async `metadata["prepare_view"]` that does it off the loop;
`prepare_view(tool, args)` runs it first, and the resolver without it fails closed.
"""

from __future__ import annotations

from typing import Any

from fim.types import CallView, Tool


class ViewError(Exception):
    """The view of a call could not be built; the call must not run."""


def retargeted(name: str, other: str) -> str:
    """Why a call a hook rewrote into a call of another target is refused (the engine's
    calls and a workflow node's say the same)."""
    return (
        f"a hook rewrote the call to '{name}' into a call to '{other}'; a rewrite may change "
        "arguments, not the target"
    )


async def prepare_view(tool: Tool | None, args: dict[str, Any]) -> None:
    """Do the untrusted work `view_of(tool, args)` needs off the event loop, if any."""
    prepare = (getattr(tool, "metadata", None) or {}).get("prepare_view")
    if prepare is not None:
        await prepare(args)


def view_of(tool: Tool, args: dict[str, Any]) -> CallView:
    """The target hooks see for `tool` called with `args` (raises ViewError)."""
    meta = dict(getattr(tool, "metadata", None) or {})
    resolver = meta.pop("call_view", None)
    meta.pop("prepare_view", None)
    meta.setdefault("category", getattr(tool, "category", None))
    if resolver is None:
        return CallView(tool.name, args, meta)
    try:
        view = resolver(args)
    except Exception as exc:
        raise ViewError(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(view, CallView):
        raise ViewError(f"the call_view of '{tool.name}' returned {type(view).__name__}")
    return CallView(view.name, view.args, {**meta, **view.metadata}, view.to_call)


__all__ = ["ViewError", "prepare_view", "view_of"]
