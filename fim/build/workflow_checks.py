"""Cross-reference checks of one workflow: node targets, `needs`, branches, templates, cycles.

A condition's `then`/`else` targets count as depending on the condition (they only run
once it has decided), so a target that is also an ancestor of its condition is a cycle.
"""

from __future__ import annotations

from typing import Any

from fim.build.builtin_names import builtin_tool_names
from fim.config.problems import suggest
from fim.config.schema import (
    AgentNode,
    ConditionNode,
    ConnectorNode,
    DatabaseNode,
    HttpConnector,
    LlmNode,
    McpNode,
    ToolNode,
    WorkflowDecl,
)
from fim.config.templates import references

_TEMPLATE_FIELDS = ("prompt", "system", "input", "if_", "args", "params")
_ALIASES = {"if_": "if"}


def _targets(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def check_workflow(checker: Any, entry: Any) -> None:
    """Report every problem of the workflow in `entry` through `checker.add`."""
    wf: WorkflowDecl = entry.decl
    doc = entry.doc
    names = set(wf.nodes)
    deps: dict[str, list[str]] = {name: [] for name in wf.nodes}
    uses: list[tuple[str, tuple, str]] = []
    for name, node in wf.nodes.items():
        base = ("nodes", name)
        for i, dep in enumerate(node.needs):
            if dep in names:
                deps[name].append(dep)
            else:
                checker.add(
                    doc.problem(
                        (*base, "needs", i),
                        f"unknown node '{dep}' in needs",
                        suggest(dep, names, "nodes"),
                    )
                )
        if isinstance(node, ConditionNode):
            for key, alias in (("then", "then"), ("else_", "else")):
                targets = _targets(getattr(node, key))
                for i, target in enumerate(targets):
                    path = (
                        (*base, alias) if isinstance(getattr(node, key), str) else (*base, alias, i)
                    )
                    if target in names:
                        deps[target].append(name)
                    else:
                        checker.add(
                            doc.problem(
                                path,
                                f"unknown node '{target}' in {alias}",
                                suggest(target, names, "nodes"),
                            )
                        )
        _check_target(checker, entry, base, node)
        for field in _TEMPLATE_FIELDS:
            value = getattr(node, field, None)
            path = (*base, _ALIASES.get(field, field))
            for where, ast in checker.templates.check_tree(checker, entry, path, value):
                for ref in _check_refs(checker, entry, where, ast, wf, name):
                    uses.append((name, where, ref))
    for key, text in wf.outputs.items():
        for where, ast in checker.templates.check_tree(checker, entry, ("outputs", key), text):
            _check_refs(checker, entry, where, ast, wf, None)
    cycle = _find_cycle(deps)
    if not cycle:
        _check_upstream(checker, entry, deps, uses)
    if cycle:
        checker.add(
            doc.problem(
                ("nodes", cycle[0]),
                "workflow cycle: " + " -> ".join(cycle),
                "remove one of these needs/then/else edges",
            )
        )


def _check_target(checker: Any, entry: Any, base: tuple, node: Any) -> None:
    doc = entry.doc
    connectors = checker.decls.entries["connector"]
    if isinstance(node, AgentNode):
        checker.ref(entry, (*base, "agent"), "agent", node.agent)
        checker.check_output_schema(entry, (*base, "output_schema"), node.output_schema)
    elif isinstance(node, LlmNode):
        checker.check_model(entry, (*base, "model"), node.model)
        checker.check_output_schema(entry, (*base, "output_schema"), node.output_schema)
    elif isinstance(node, (ConnectorNode, DatabaseNode)):
        if not checker.ref(entry, (*base, "connector"), "connector", node.connector):
            return
        decl = connectors[node.connector].decl
        wanted = "http" if isinstance(node, ConnectorNode) else "database"
        if decl.kind != wanted:
            checker.add(
                doc.problem(
                    (*base, "connector"),
                    f"connector '{node.connector}' is kind: {decl.kind}, "
                    f"but a {node.type} node needs kind: {wanted}",
                    "use type: database for SQL, type: connector for HTTP actions",
                )
            )
        elif (
            isinstance(decl, HttpConnector)
            and isinstance(node, ConnectorNode)
            and (node.action not in decl.actions)
        ):
            checker.add(
                doc.problem(
                    (*base, "action"),
                    f"connector '{node.connector}' has no action '{node.action}'",
                    suggest(node.action, decl.actions, "actions"),
                )
            )
    elif isinstance(node, McpNode) and checker.decls.project_ok:
        servers = checker.decls.project.mcp_servers
        if node.server not in servers:
            checker.add(
                doc.problem(
                    (*base, "server"),
                    f"unknown MCP server '{node.server}'",
                    suggest(node.server, servers, "MCP servers (fim.yaml)"),
                )
            )
    elif isinstance(node, ToolNode):
        tools = builtin_tool_names()
        if node.tool not in tools:
            checker.add(
                doc.problem(
                    (*base, "tool"),
                    f"unknown builtin tool '{node.tool}'",
                    suggest(node.tool, tools, "tools"),
                )
            )


def _check_upstream(
    checker: Any, entry: Any, deps: dict[str, list[str]], uses: list[tuple[str, tuple, str]]
) -> None:
    """A node may only read outputs of nodes it (transitively) waits for; anything else
    is a race that works or fails depending on timing."""
    memo: dict[str, set[str]] = {}

    def ancestors(node: str) -> set[str]:
        if node not in memo:
            memo[node] = set()
            for dep in deps[node]:
                memo[node] |= {dep} | ancestors(dep)
        return memo[node]

    for name, where, ref in uses:
        if ref not in ancestors(name):
            checker.add(
                entry.doc.problem(
                    where,
                    f"node '{name}' uses nodes.{ref} but does not wait for it",
                    f"add '{ref}' to the needs of '{name}'",
                )
            )


def _check_refs(
    checker: Any, entry: Any, path: tuple, ast: Any, wf: WorkflowDecl, own: str | None
) -> list[str]:
    """Report unknown nodes/inputs; returns the other nodes the template reads."""
    found: list[str] = []
    for ref in sorted(references(ast, "nodes")):
        if ref not in wf.nodes:
            checker.add(
                entry.doc.problem(
                    path,
                    f"template refers to unknown node '{ref}'",
                    suggest(ref, wf.nodes, "nodes"),
                )
            )
        elif ref == own:
            checker.add(
                entry.doc.problem(
                    path,
                    f"node '{own}' refers to its own output",
                    "a node can only use outputs of nodes it needs",
                )
            )
        else:
            found.append(ref)
    for ref in sorted(references(ast, "inputs")):
        if ref not in wf.inputs:
            checker.add(
                entry.doc.problem(
                    path,
                    f"template refers to unknown input '{ref}'",
                    suggest(ref, wf.inputs, "inputs"),
                )
            )
    return found


def _find_cycle(deps: dict[str, list[str]]) -> list[str]:
    """First dependency cycle found, as a path that starts and ends at the same node."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for dep in deps.get(node, ()):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for start in deps:
        if start not in state and (cycle := visit(start)):
            return cycle
    return []
