"""`confirm`: a human approves a call before it runs.

By default it asks before every call that writes, as Claude Code's default permission mode
asks before edits and commands: the calls `readonly_guard` would block on a read-only agent
(`fim.hooks.writes`, one decision for both: `access: write|admin` metadata, which shell,
python_exec, file_ops' writes and project functions not marked `@fim.tools.read_only`
carry, and SQL that is not exactly one plain read; on PostgreSQL also a statement naming a
function the read-only catalog check refuses, such as `SELECT shop.cancel_order(2)`:
`fim.connectors.meta.prepare_query`), and connector actions declared
`requires_confirmation: true`. SQL is judged by what it names: a view that writes is a
read to it. `with: {all: true}` asks for every call the hook's
`matcher` matches, reads too; `with: {writes: false}` asks only for actions declared
`requires_confirmation` (the default before writes were asked about). The call waits on
a pending approval in the state store (so it survives a restart and can be decided from
another process) and runs only if a human approves it before `timeout` seconds; denial
and expiry block it with a reason that tells the model not to retry the same call.
`fim validate` warns about a confirm that can ask about no call of its agent
(`asks_about_nothing`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fim.hooks.approval import ask_human
from fim.hooks.base import PreToolUseHook
from fim.hooks.writes import write_of
from fim.types import HookContext, HookResult

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl


class ConfirmOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    all_: bool = Field(default=False, alias="all")
    """Ask for every matched call, reads too."""
    writes: bool = True
    """Ask for every matched call that writes (`fim.hooks.writes`); false asks only for
    connector actions declared `requires_confirmation: true`."""
    timeout: float = Field(default=300.0, gt=0)
    """Seconds a human has to decide before the approval expires and the call is blocked."""
    poll: float = Field(default=0.25, gt=0, le=10)
    """Seconds between checks of the state store while waiting."""


class Confirm(PreToolUseHook):
    Options: ClassVar[type[BaseModel]] = ConfirmOptions
    priority = 90

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.timeout = self.options.timeout

    def chain_timeout(self) -> float:
        # The wait for a human is the hook's job; the chain only guards against a hang.
        return max(self.timeout, self.options.timeout) + 10.0

    async def __call__(self, context: HookContext) -> HookResult:
        opts: ConfirmOptions = self.options
        why = await self.reason(context)
        if why is None:
            return HookResult()
        return await ask_human(self, context, reason=why, timeout=opts.timeout, poll=opts.poll)

    async def reason(self, context: HookContext) -> str | None:
        """Why a human is asked about this call (the approval's reason), None to let it run."""
        opts: ConfirmOptions = self.options
        if opts.all_:
            return "this agent confirms every call"
        if context.metadata.get("requires_confirmation"):
            return "the action is declared requires_confirmation"
        if not opts.writes:
            return None
        write = await write_of(context)
        return None if write is None else write.describe(context.tool_name)


def asks_about_nothing(
    snapshot: Snapshot, agent: AgentDecl, options: dict[str, Any], matcher: str | None
) -> tuple[str, str] | None:
    """(message, hint) when a confirm hook with `options` and `matcher` on `agent` can ask
    about no call at all, for a `fim validate` warning: a hook that looks like protection
    and never fires. None when it may ask, or when fim cannot tell before the run (an MCP
    tool's hints, a workflow's calls)."""
    opts = ConfirmOptions.model_validate(options)
    if opts.all_:
        return None  # asks for every matched call: `fim validate` checks the matcher
    plain = matcher is None or matcher.strip() in ("", "*")
    asked = _asked(snapshot, agent, opts.writes, set(), enough=plain)
    if asked is None:
        return None
    what = "calls that write" if opts.writes else "actions declared requires_confirmation"
    if asked and matcher is not None and matcher.strip() not in ("", "*"):
        # deferred: fim.hooks.base is loaded by the time a hook is checked; keeps this light
        from fim.hooks.base import compile_matcher

        match = compile_matcher(matcher)
        if any(match(name) for name in asked):
            return None
        shown = ", ".join(dict.fromkeys(asked))
        return (
            f"confirm on agent '{agent.name}' asks about no call: its matcher {matcher!r} "
            f"matches none of the {what} ({shown})",
            "fix the matcher, or add with: {all: true} to ask for every call it matches",
        )
    if asked:
        return None
    if opts.writes:
        message = (
            f"confirm on agent '{agent.name}' asks about no call: none of its tools writes "
            "and no connector action declares requires_confirmation"
        )
    else:
        message = (
            f"confirm on agent '{agent.name}' asks about no call: with writes: false it asks "
            "only for connector actions declared requires_confirmation, and it has none"
        )
    return message, "add with: {all: true} to ask before every call; a matcher narrows it"


def _asked(
    snapshot: Snapshot, agent: AgentDecl, writes: bool, seen: set[str], enough: bool = False
) -> list[str] | None:
    """The names of `agent`'s calls (and its delegates') confirm may ask about; None when
    that is only known at run time. With `enough`, the first names found are enough (no
    matcher to test them against): connectors are read before the tools, whose modules
    `fim validate` then never loads for an agent with a write action."""
    if agent.name in seen:
        return []
    seen.add(agent.name)
    if agent.workflows or (writes and agent.mcp):
        return None  # a workflow's calls, an MCP tool's hints: known once they run
    asked: list[str] = []
    for name in agent.connectors:  # one unavailable here is declared too (newcomer-52 #1)
        decl = snapshot.connectors.get(name) or snapshot.declared_unavailable.get(name)
        if decl is None:
            continue
        if decl.kind == "database":
            if writes and not decl.read_only:
                asked.append(f"{name}__query")
            continue
        for action_name, action in decl.actions.items():
            if action.requires_confirmation or (writes and action.access != "read"):
                asked.append(f"{name}__{action_name}")
    if enough and asked:
        return asked
    # deferred: the tools are only needed by `fim validate`'s warning, never by a run
    from fim.build.builtin_names import is_python_tool, tool_name
    from fim.errors import RunError
    from fim.hooks.claude import NAMES
    from fim.hooks.python_hooks import load_module
    from fim.tools import builtin
    from fim.tools.python_tools import PythonToolError, resolve

    tools = list(agent.tools)
    if agent.tool_categories:
        chosen = set(agent.tool_categories)
        tools += [n for n in builtin.names() if n not in tools and builtin.category(n) in chosen]
    for entry in tools if writes else ():
        try:
            if is_python_tool(entry):
                access = resolve(snapshot, entry, load_module).metadata.get("access")
            else:
                access = builtin.load(entry).metadata.get("access")
        except RunError:  # built per run (`make(ctx)`): its access is not known before
            access = "write"
        except PythonToolError:  # `fim validate` reports it as an error
            continue
        if access in ("write", "admin"):
            asked += [tool_name(entry), *NAMES.get(entry, ())]
    for name in agent.delegates:
        if name in snapshot.agents:
            more = _asked(snapshot, snapshot.agents[name], writes, seen)
            if more is None:
                return None
            asked += more
    return asked


HOOK = Confirm
