"""The capability area of `tools: [module:function]`: a project's own Python functions.

The tools themselves are built by `fim.tools.python_tools`; this provider hands it the
module loader of `python:` hooks (`fim.hooks.python_hooks.load_module`, a layer above the
tools), so a function's module is found, loaded and reloaded exactly like a hook's.
Like builtins named in `tools:`, function tools are pinned: tool selection never drops them,
and they are registered as themselves in every tool mode (legacy or progressive), so hooks
see `add`, never a meta-tool in front of it.
"""

from __future__ import annotations

from fim.hooks.python_hooks import load_module
from fim.run.services import Provision, RunContext
from fim.tools.python_tools import load_tools, refs_of


def provide(ctx: RunContext) -> Provision | None:
    if not refs_of(ctx.agent.tools):
        return None
    tools = load_tools(ctx.snapshot, ctx.agent, load_module)
    return Provision(tools=list(tools), pinned=[t.name for t in tools])


__all__ = ["provide"]
