"""Cross-reference checks of one workflow: node targets, `needs`, branches, templates, cycles;
and `check_agent_workflows`, which needs the compiled project.

What a node names (an agent, a connector, a tool...) is checked by its own type
(`NodeType.check_refs`, through a `NodeChecks` made here); the edges and templates are
checked here for every type alike. A branch target (a condition's `then`/`else`) counts as
depending on the node that names it (it only runs once that node has decided), so a
target that is also an ancestor of its condition is a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fim.build.builtin_names import builtin_tool_names, is_python_tool, tool_problems
from fim.build.snapshot import Locate, Snapshot
from fim.config.problems import suggest
from fim.config.schema import WorkflowDecl
from fim.config.templates import (
    NODE_ATTRIBUTES,
    attribute_references,
    node_attribute_problem,
    references,
)
from fim.errors import Problem
from fim.workflows.node_types import NodeType

Where = tuple[str | int, ...]


@dataclass(frozen=True)
class _NodeChecks:
    """`NodeChecks` for one node of one workflow file: paths are below `nodes.<id>`."""

    checker: Any
    entry: Any
    base: Where

    def problem(self, where: Where, message: str, hint: str | None) -> None:
        self.checker.add(self.entry.doc.problem((*self.base, *where), message, hint))

    def ref(self, where: Where, kind: str, name: str) -> bool:
        return bool(self.checker.ref(self.entry, (*self.base, *where), kind, name))

    def model(self, where: Where, ref: Any) -> None:
        self.checker.check_model(self.entry, (*self.base, *where), ref)

    def output_schema(self, where: Where, spec: Any) -> None:
        self.checker.check_output_schema(self.entry, (*self.base, *where), spec)

    def connector(self, name: str) -> Any:
        return self.checker.decls.entries["connector"][name].decl

    def mcp_servers(self) -> Mapping[str, Any] | None:
        decls = self.checker.decls
        return decls.project.mcp_servers if decls.project_ok else None

    def builtin_tools(self) -> frozenset[str]:
        return builtin_tool_names()

    def tool(self, where: Where, entry: str) -> None:
        """The checks of an agent's `tools:` entry (`tool_problems`): an unknown builtin,
        a `module:function` whose module is not in the hooks folder, a name taken by a
        builtin or a meta-tool. Importing the function is the compile's later check
        (`fim.tools.python_tools.check_tools`, which covers `python_tool_nodes` too)."""
        decls = self.checker.decls
        modules, folder = decls.python_hooks, decls.folder("hook")
        names = builtin_tool_names()
        for _i, message, hint in tool_problems([entry], names, modules, folder, decls.root):
            self.problem(where, message.removeprefix("tools: "), hint)


MAPPING_METHODS = frozenset(n for n in dir(dict) if not n.startswith("_"))
"""`nodes.get.output` and `inputs.items` are the dict's methods in Jinja (an attribute
before an item), so a node or input with such a name could never be read in a template."""


def _alias(node: NodeType, field: str) -> str:
    return type(node).model_fields[field].alias or field


def check_workflow(checker: Any, entry: Any) -> None:
    """Report every problem of the workflow in `entry` through `checker.add`."""
    wf: WorkflowDecl = entry.decl
    doc = entry.doc
    names = set(wf.nodes)
    deps: dict[str, list[str]] = {name: [] for name in wf.nodes}
    uses: list[tuple[str, Where, str]] = []
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
        for _label, alias, targets in node.branches():
            single = isinstance(getattr(node, _field_of(node, alias)), str)
            for i, target in enumerate(targets):
                path = (*base, alias) if single else (*base, alias, i)
                if target in names:
                    deps[target].append(name)
                    if name in wf.nodes[target].needs:  # a live edge whichever branch
                        checker.add(
                            doc.problem(
                                ("nodes", target, "needs", wf.nodes[target].needs.index(name)),
                                f"'{target}' needs '{name}', whose '{alias}' names it: it "
                                "would run whichever branch is taken",
                                f"drop '{name}' from its needs: the {alias} edge already orders it",
                            )
                        )
                else:
                    checker.add(
                        doc.problem(
                            path,
                            f"unknown node '{target}' in {alias}",
                            suggest(target, names, "nodes"),
                        )
                    )
        node.check_refs(_NodeChecks(checker, entry, base))
        for field in node.template_fields:
            value = getattr(node, field, None)
            path = (*base, _alias(node, field))
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


def _field_of(node: NodeType, alias: str) -> str:
    """The python name of the field spelled `alias` in YAML (`else` -> `else_`)."""
    for field, info in type(node).model_fields.items():
        if (info.alias or field) == alias:
            return field
    return alias


def _check_upstream(
    checker: Any, entry: Any, deps: dict[str, list[str]], uses: list[tuple[str, Where, str]]
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
    checker: Any, entry: Any, path: Where, ast: Any, wf: WorkflowDecl, own: str | None
) -> list[str]:
    """Report unknown nodes/inputs; returns the other nodes the template reads."""
    found: list[str] = []
    for variable, declared in (("nodes", wf.nodes), ("inputs", wf.inputs)):
        for ref in sorted(references(ast, variable) & MAPPING_METHODS & set(declared)):
            checker.add(
                entry.doc.problem(
                    path,
                    f"`{variable}.{ref}` names the mapping's own method `{ref}`, not "
                    f"{'node' if variable == 'nodes' else 'input'} '{ref}'",
                    f"rename '{ref}' (e.g. '{ref}_{'step' if variable == 'nodes' else 'value'}')",
                )
            )
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
    for ref, attribute in sorted(attribute_references(ast, "nodes")):
        known = attribute in NODE_ATTRIBUTES or attribute in MAPPING_METHODS  # `.get(...)`
        if ref in wf.nodes and not known:
            checker.add(entry.doc.problem(path, *node_attribute_problem(ref, attribute)))
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


# ---------------------------------------------------------------- across the project
# How agents use workflows cannot be seen from one workflow file: a workflow that pauses for
# a human cannot run inline inside an agent's tool call, since nobody would be there to
# resume the agent's turn.


def python_tool_nodes(snapshot: Snapshot) -> list[tuple[str, str, str]]:
    """(workflow, node, `module:function`) of every `tool` node that calls a project
    function: the compile imports and builds each, as it does an agent's."""
    return [
        (name, node_id, tool)
        for name, decl in snapshot.workflows.items()
        for node_id, node in decl.nodes.items()
        if node.type == "tool" and is_python_tool(tool := str(getattr(node, "tool", "")))
    ]


def human_nodes(snapshot: Snapshot, workflow: str) -> list[str]:
    decl = snapshot.workflows.get(workflow)
    if decl is None:
        return []
    return [node_id for node_id, node in decl.nodes.items() if node.type == "human"]


def check_agent_workflows(snapshot: Snapshot, locate: Locate | None = None) -> list[Problem]:
    """Problems with agents' `workflows:` lists (reported at the list entry)."""
    problems: list[Problem] = []
    where = locate or snapshot.source
    for name, agent in snapshot.agents.items():
        for index, workflow in enumerate(agent.workflows):
            humans = human_nodes(snapshot, workflow)
            if not humans:
                continue
            src = where("agent", name, ("workflows", index))
            problems.append(
                Problem(
                    src.path,
                    src.line,
                    src.column,
                    f"agent '{name}' lists workflow '{workflow}' under workflows:, but it has "
                    f"a human node ({', '.join(humans)}) and cannot run inside an agent",
                    hint=f"remove '{workflow}' from workflows: and start it with "
                    f"`fim workflow run {workflow}`",
                )
            )
    return problems
