"""`fim validate` over the `args` of `tool_called` and `tool_sequence` calls (newcomer55
#9): each key must be a parameter of the tool, or the assertion could never be met
(`args: {orderId: A1001}` where the tool takes `order_id` failed only at run time).

The parameters are read where they are declared, without running anything: an HTTP
connector action's `parameters` schema, and a project function's (`module:function` of
the agent's `tools:`) signature, parsed from its pinned source (`ast`, not imported). A
tool whose parameters cannot be told that way (a builtin, an MCP tool, a function taking
`**kwargs`, an action whose schema composes others) is not checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import Any

from fim.build.builtin_names import is_python_tool, tool_name
from fim.build.snapshot import Locate, Snapshot
from fim.config.problems import suggest
from fim.config.schema import AgentDecl, EvalSuite
from fim.errors import Problem

Where = tuple[str | int, ...]


def _calls(base: Where, assertion: Any) -> Iterator[tuple[Where, str, dict[str, Any]]]:
    """(where its args are written, tool name, args) of each call an assertion describes."""
    called = assertion.tool_called
    if called is not None and called.args:
        yield (*base, "tool_called", "args"), called.name, called.args
    sequence = assertion.tool_sequence
    for k, call in enumerate(sequence.calls or [] if sequence is not None else []):
        if call.args:
            yield (*base, "tool_sequence", "calls", k, "args"), call.name, call.args


def tool_args_problems(
    snapshot: Snapshot, locate: Locate, suite: EvalSuite, assertions: Iterable[tuple[Where, Any]]
) -> list[Problem]:
    """A problem at each `args` key that is no parameter of its tool, with a did-you-mean."""
    agent = snapshot.agents.get(suite.agent or "")
    problems: list[Problem] = []
    for base, assertion in assertions:
        for where, name, args in _calls(base, assertion):
            known = parameters(snapshot, agent, name)
            if known is None:
                continue
            for key in args:
                if key in known:
                    continue
                src = locate("eval", suite.name, (*where, key))
                problems.append(
                    Problem(
                        src.path,
                        src.line,
                        src.column,
                        f"tool '{name}' has no parameter '{key}': this assertion could never "
                        "be met",
                        _meant(key, known, name),
                    )
                )
    return problems


def _meant(key: str, known: set[str], tool: str) -> str | None:
    """`did you mean 'order_id'?` for `orderId` too (the same name in another case style)."""
    folded = key.replace("_", "").replace("-", "").casefold()
    alike = [k for k in sorted(known) if k.replace("_", "").replace("-", "").casefold() == folded]
    if alike:
        return f"did you mean '{alike[0]}'?"
    return suggest(key, known, f"parameters of {tool}")


def parameters(snapshot: Snapshot, agent: AgentDecl | None, name: str) -> set[str] | None:
    """The parameter names of the tool `name` of `agent`, or None when they cannot be told
    without running anything."""
    if agent is not None:
        for entry in agent.tools:
            if is_python_tool(entry) and tool_name(entry) == name:
                return _signature(snapshot, entry)
    connector, _, action = name.partition("__")
    decl = snapshot.connectors.get(connector) if action else None
    if decl is None or decl.kind == "database" or action not in decl.actions:
        return None
    schema = decl.actions[action].parameters
    props = schema.get("properties")
    if not isinstance(props, dict) or any(k in schema for k in _OPEN):
        return None
    if schema.get("additionalProperties", False) is not False:
        return None
    return set(props)


_OPEN = ("allOf", "anyOf", "oneOf", "$ref", "patternProperties", "if", "dependentSchemas")
"""Keywords that may admit parameters besides `properties`."""


def _signature(snapshot: Snapshot, entry: str) -> set[str] | None:
    """The parameters of the function `module:function` as its pinned source defines it at
    the module's top level, or None (not found there, or taking `**kwargs`)."""
    module, _, function = entry.strip().rpartition(":")
    folder = snapshot.project.paths.hooks.strip("/")
    stem = f"{folder}/{module.replace('.', '/')}"
    source = snapshot.modules.get(f"{stem}.py") or snapshot.modules.get(f"{stem}/__init__.py")
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found = None
    for node in tree.body:  # the last definition of the name wins, as in Python
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            found = node
    if found is None or found.args.kwarg is not None:
        return None
    args = found.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


__all__ = ["parameters", "tool_args_problems"]
