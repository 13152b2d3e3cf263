"""The names a hook matcher can meet on one agent, for `fim validate`.

A guard whose matcher can never fire (`matcher: database` where hooks see `shop__query`,
`matcher: Bash` on an agent without `shell`) is worse than none: it looks like protection.
The names are the hook view's (`fim.tools.view`): builtins, `<connector>__<action>`,
`<database>__list_tables|describe|query`, `<server>__<tool>` for MCP (its tools are only
known once the server runs, so any name under the server's prefix counts), the meta-tools
that are their own target, and Claude Code's aliases (`fim.hooks.claude`).
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fim.build.builtin_names import tool_name
from fim.hooks.base import compile_matcher
from fim.hooks.claude import NAMES, mcp_alias
from fim.tools import builtin
from fim.tools.naming import tool_name as shortened

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl

_PROBE = "tool"
"""Stands in for an MCP tool name not known before the server runs."""


@dataclass
class Targets:
    names: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)
    behind: dict[str, list[str]] = field(default_factory=dict)
    """Meta-tool name -> the targets hooks see instead (`database` -> `shop__query`)."""

    def samples(self) -> list[str]:
        """Every concrete name, plus a probe under each MCP server's two prefixes."""
        probes = [f"{s}__{_PROBE}" for s in self.servers]
        probes += [mcp_alias(s, _PROBE) for s in self.servers]
        return [*self.names, *probes]


def hook_targets(snapshot: Snapshot, agent: AgentDecl, unavailable: bool = True) -> Targets:
    """Every name a hook of `agent` can meet: its own calls, and — since a delegate and a
    workflow it starts run under its hooks — theirs. A connector unavailable here (an
    unset `${VAR}`) counts with its declared actions (`unavailable=False`: it does not):
    where its secret is set they are called, so a guard on them is not a mistake and the
    variable's own warning names the cause (newcomer-52 #1)."""
    found = Targets()
    _collect(snapshot, agent, found, set(), unavailable)
    found.names = list(dict.fromkeys(found.names))
    found.servers = list(dict.fromkeys(found.servers))
    return found


def declared_tools(agent: AgentDecl) -> list[str]:
    """The agent's `tools:` entries, then the builtins of its `tool_categories:`."""
    tools = list(agent.tools)
    if agent.tool_categories:
        chosen = set(agent.tool_categories)
        tools += [n for n in builtin.names() if n not in tools and builtin.category(n) in chosen]
    return tools


def _collect(
    snapshot: Snapshot, agent: AgentDecl, found: Targets, seen: set[str], unavailable: bool
) -> None:
    if agent.name in seen:
        return
    seen.add(agent.name)
    tools = declared_tools(agent)
    names = found.names
    for tool in tools:
        names += [tool_name(tool), *NAMES.get(tool, ())]  # `mytools:add` is called `add`
    for name in agent.connectors:
        decl = snapshot.connectors.get(name)
        if decl is None and unavailable:
            decl = snapshot.declared_unavailable.get(name)
        if decl is None:
            continue
        if decl.kind == "database":
            names += [f"{name}__{a}" for a in ("list_tables", "describe", "query")]
            names += [shortened(name, a) for a in ("list_tables", "describe", "query")]
            found.behind.setdefault("database", []).extend([f"{name}__query", f"{name}__*"])
        else:
            names += [f"{name}__{a}" for a in decl.actions] + [f"{name}__discover"]
            names += [shortened(name, a) for a in decl.actions]  # the name a model calls
            found.behind.setdefault("connector", []).append(f"{name}__*")
    if agent.mcp:
        names.append("mcp")
        found.servers += agent.mcp
    if agent.skills:
        names.append("read_skill")
    if agent.delegates:
        names.append("call_agent")
    names.append("request_tools")
    for name in agent.delegates:
        if name in snapshot.agents:
            _collect(snapshot, snapshot.agents[name], found, seen, unavailable)
    if agent.workflows:
        names.append("run_workflow")
    for name in agent.workflows:
        workflow = snapshot.workflows.get(name)
        for node in workflow.nodes.values() if workflow is not None else ():
            uses = node.uses()
            for tool in uses.tools:
                names += [tool, *NAMES.get(tool, ())]
                if "__" in tool:  # a connector's action or query: the name a node's call has
                    names.append(shortened(*tool.split("__", 1)))
            for server, tool in uses.mcp:
                names += [f"{server}__{tool}", shortened(server, tool), mcp_alias(server, tool)]
            for used in uses.agents:
                if used in snapshot.agents:
                    _collect(snapshot, snapshot.agents[used], found, seen, unavailable)


def _may_match_server(matcher: str, servers: list[str]) -> bool:
    """A matcher written for tools of a running MCP server (`sh__run_*`, `re:^sh__`)."""
    text = matcher[3:] if matcher.startswith("re:") else matcher
    return any(f"{s}__" in text for s in servers) or (bool(servers) and "mcp__" in text)


def unmatched(matcher: str | None, targets: Targets) -> str | None:
    """None when the matcher can fire on this agent, else a hint with a did-you-mean."""

    if matcher is None or matcher.strip() in ("", "*"):
        return None
    match = compile_matcher(matcher)
    if any(match(name) for name in targets.samples()) or _may_match_server(
        matcher, targets.servers
    ):
        return None
    words = re.split(r"[|]", matcher[3:] if matcher.startswith("re:") else matcher)
    pool = targets.names + [f"{s}__*" for s in targets.servers]
    close: list[str] = []
    for word in words:
        stem = word.strip().strip("^$").replace(".*", "*")
        close += targets.behind.get(stem, [])
        close += difflib.get_close_matches(stem, pool, n=2, cutoff=0.5)
        close += [n for n in pool if stem and fnmatch.fnmatchcase(n, f"*{stem}*")][:2]
    close = list(dict.fromkeys(close))[:3]
    shown = ", ".join(targets.names[:12]) + (", ..." if len(targets.names) > 12 else "")
    return (
        (f"did you mean {' or '.join(repr(c) for c in close)}? " if close else "")
        + f"hooks see: {shown}"
        + "".join(f", {s}__<tool> (also mcp__{s}__<tool>)" for s in targets.servers)
    )


__all__ = ["Targets", "declared_tools", "hook_targets", "unmatched"]
