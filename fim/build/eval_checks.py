"""`fim validate` over what an eval case names at run time: the tools of `tool_called`,
`tool_not_called` and `tool_sequence` must be tools its suite's agent (or workflow) can call.

A misspelt name is worse than a failing case: `tool_called: {name: calculater}` fails
only once a model has been paid for, and `tool_not_called: shel` passes for ever. The
suite's agent and workflow names are checked with the other references
(`fim.build.checks.Checker.check_eval`); this check needs the compiled project (the
tools a connector or a delegate brings), so it runs with the snapshot checks.

The names an agent can call are the hook view's (`fim.hooks.targets.hook_targets`, handed
in by `fim.build.compile`, which sits above the hooks): builtins, `<connector>__<action>`,
the meta-tools, its delegates' and workflows' tools; any name under an MCP server's
`<server>__` prefix counts, as its tools are known only once it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fim.build.snapshot import Locate, Snapshot
from fim.config.problems import suggest
from fim.config.schema import AgentDecl, EvalSuite
from fim.errors import Problem

TargetsOf = Callable[[Snapshot, AgentDecl], Any]
"""`fim.hooks.targets.hook_targets`: (names, servers, behind) of what an agent can call."""

Where = tuple[str | int, ...]


def _named_tools(suite: EvalSuite) -> Iterator[tuple[Where, str]]:
    """Every tool name the suite's assertions expect, with where it is written."""
    for i, case in enumerate(suite.cases):
        for j, assertion in enumerate(case.expect):
            base: Where = ("cases", i, "expect", j)
            if assertion.tool_called is not None:
                yield (*base, "tool_called", "name"), assertion.tool_called.name
            if assertion.tool_not_called is not None:
                yield (*base, "tool_not_called"), assertion.tool_not_called
            if assertion.tool_sequence is not None:
                for k, name in enumerate(assertion.tool_sequence.tools):
                    yield (*base, "tool_sequence", "tools", k), name


def _callable(
    snapshot: Snapshot, suite: EvalSuite, targets: TargetsOf
) -> tuple[set[str], list[str], str] | None:
    """(names, MCP servers, what calls them) for the suite's target; None when the target
    does not exist (reported as an unknown agent or workflow already)."""
    found: list[Any] = []
    names: set[str] = set()
    servers: list[str] = []
    if suite.agent is not None:
        agent = snapshot.agents.get(suite.agent)
        if agent is None:
            return None
        found.append(targets(snapshot, agent))
        what = f"agent '{agent.name}'"
    else:
        workflow = snapshot.workflows.get(suite.workflow or "")
        if workflow is None:
            return None
        what = f"workflow '{workflow.name}'"
        for node in workflow.nodes.values():
            uses = node.uses()
            names.update(uses.tools)
            names.update(f"{server}__{tool}" for server, tool in uses.mcp)
            found += [
                targets(snapshot, snapshot.agents[a]) for a in uses.agents if a in snapshot.agents
            ]
    for target in found:
        names.update(target.names)
        names.update(target.behind)  # the meta-tools (`connector`, `database`) by their name
        servers += target.servers
    return names, servers, what


def check_eval_tools(snapshot: Snapshot, locate: Locate, targets: TargetsOf) -> list[Problem]:
    """Every tool an eval assertion names that its suite's target cannot call."""
    problems: list[Problem] = []
    for suite in snapshot.evals.values():
        expected = list(_named_tools(suite))
        if not expected:
            continue
        known = _callable(snapshot, suite, targets)
        if known is None:
            continue
        names, servers, what = known
        prefixes = tuple(f"{server}__" for server in servers)
        for where, name in expected:
            if name in names or (prefixes and name.startswith(prefixes)):
                continue
            hint = suggest(name, names | {f"{s}__*" for s in servers}, f"tools of {what}")
            src = locate("eval", suite.name, where)
            message = f"{what} has no tool '{name}': this assertion could never be met"
            if where[-1] == "tool_not_called":
                message = f"{what} has no tool '{name}': this assertion could never fail"
            problems.append(Problem(src.path, src.line, src.column, message, hint))
    return problems
