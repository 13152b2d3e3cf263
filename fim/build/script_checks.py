"""`fim validate`'s warnings about a scripted model's file, against the agents that run on it
(`model: scripted:<file>`, directly or through a role).

A script is where a newcomer types tool names most, and a typo there (`calc` for
`calculator`) passed validation: the run answered the call with "there is no tool named"
and the eval failed later, far from the cause. Each tool name a step calls is checked
against the tools the agent's model can call; one it cannot is a warning, not an error,
since a script may test the unknown-tool path on purpose. So is a call of a meta-tool
(`connector`, `database`, `mcp`) naming a connector, database or MCP server the agent does
not have, or an action its connector lacks (`action: list_pet`). A script whose run would
need more model calls than the agent's `max_iterations` allows (the run stops without an
answer there) is a warning too.

The names an agent's model can call are handed in (`ToolsOf`): the hook view's
(`fim.hooks.targets`) sits a layer up; `fim.commands.project_warnings` passes them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from fim.build.snapshot import Snapshot
from fim.config.problems import suggest
from fim.config.schema import AgentDecl, HttpConnector
from fim.config.script_files import is_branching
from fim.config.yamlio import Document, Path_, parse
from fim.errors import Problem, RunError

SCRIPTED = "scripted:"

ToolsOf = Callable[[Snapshot, AgentDecl], tuple[set[str], list[str]]]
"""(the tool names `agent`'s model can call, the MCP servers whose `<server>__` tools it
can call: known only once they run)."""


def script_warnings(snapshot: Snapshot, tools_of: ToolsOf) -> list[Problem]:
    """Every warning about the scripts the project's agents run on: unknown tool names at
    their `name:`, and steps past `max_iterations` at the first one a run never reaches."""
    problems: list[Problem] = []
    documents: dict[str, Document | None] = {}
    for name, agent in snapshot.agents.items():
        file = _script_of(snapshot, agent)
        if file is None:
            continue
        if file not in documents:
            documents[file] = _read(snapshot, file)
        doc = documents[file]
        if doc is None:
            continue
        names, servers = tools_of(snapshot, agent)
        unavailable = [c for c in agent.connectors if c in snapshot.unavailable_connectors]
        problems += _mode_problems(doc, name, servers, _mcp_mode(agent, snapshot))
        problems += _tool_problems(doc, name, names, servers, unavailable)
        problems += _meta_problems(doc, name, _meta_targets(snapshot, agent, names))
        if agent.engine == "react":
            problems += _iteration_problems(doc, name, agent.max_iterations)
    return problems


def _script_of(snapshot: Snapshot, agent: AgentDecl) -> str | None:
    """The script file `agent` runs on (relative to the project), or None."""
    try:
        model = snapshot.model_settings(agent.model).model
    except RunError:  # an unknown role is reported by the declaration checks
        return None
    if not model.startswith(SCRIPTED):
        return None
    return model.removeprefix(SCRIPTED).strip().replace("\\", "/") or None


def _read(snapshot: Snapshot, file: str) -> Document | None:
    """The script's document, positions kept; None when it cannot be read or parsed (the
    compile reports that as an error)."""
    try:
        doc = parse((snapshot.root / file).read_text(encoding="utf-8"), file)
    except Exception:  # reported by the compile's script check, or a race
        return None
    return None if doc.problems else doc


def _step_lists(data: Any) -> Iterator[tuple[Path_, list[Any]]]:
    """Each list of steps a run is served from, with where it is written: the plain form's
    one list, or each reply's steps and `default`."""
    if not is_branching(data):
        steps, at = (data.get("steps"), ("steps",)) if isinstance(data, dict) else (data, ())
        if isinstance(steps, list):
            yield at, steps
        return
    for r, reply in enumerate(data.get("replies") or ()):
        if isinstance(reply, dict) and isinstance(reply.get("steps"), list):
            yield ("replies", r, "steps"), reply["steps"]
    if isinstance(data.get("default"), list):
        yield ("default",), data["default"]


def _calls(step: Any) -> list[tuple[Path_, str]]:
    """The tool names one step calls, each with its path inside the step (as the run reads
    the step: `tool_calls`, else `tool_call`)."""
    return [((*at, "name"), str(call["name"])) for at, call in _call_items(step)]


def _call_items(step: Any) -> list[tuple[Path_, dict[str, Any]]]:
    """The calls one step makes (`{name, arguments}`), each with its path inside the step."""
    if not isinstance(step, dict):
        return []
    found: list[tuple[Path_, Any]]
    if step.get("tool_calls"):
        raw = step["tool_calls"]
        found = [(("tool_calls", j), c) for j, c in enumerate(raw if isinstance(raw, list) else [])]
    elif step.get("tool_call"):
        found = [(("tool_call",), step["tool_call"])]
    else:
        return []
    return [(at, c) for at, c in found if isinstance(c, dict) and c.get("name") is not None]


def _tool_problems(
    doc: Document, agent: str, names: set[str], servers: list[str], unavailable: list[str]
) -> list[Problem]:
    """A call of a tool the agent's model cannot call; one it lacks only because a
    connector of the agent is unavailable (its `connector`/`database` meta-tool, or
    `<connector>__<action>`) says so instead: that connector's own warning is the cause."""
    prefixes = tuple(f"{server}__" for server in servers)
    problems: list[Problem] = []
    for at, steps in _step_lists(doc.data):
        for i, step in enumerate(steps):
            for where, tool in _calls(step):
                if tool in names or (prefixes and tool.startswith(prefixes)):
                    continue
                cause = _unavailable_cause(tool, unavailable)
                if cause:
                    message = (
                        f"{cause} unavailable (above), so agent '{agent}' has no tool "
                        f"'{tool}': a run of the agent is refused before it starts"
                    )
                    problems.append(doc.problem((*at, i, *where), message))
                    continue
                pool = names | {f"{s}__*" for s in servers}
                hint = suggest(tool, pool, f"tools of agent '{agent}'") or "it has no tools"
                message = (
                    f"agent '{agent}' has no tool '{tool}': its run answers this call with "
                    "'there is no tool named' (fine if the script tests that on purpose)"
                )
                problems.append(doc.problem((*at, i, *where), message, hint))
    return problems


def _mcp_mode(agent: AgentDecl, snapshot: Snapshot) -> str:
    """How the agent's model sees its MCP tools: `fim.run.services.resolve_mode`'s
    precedence (a layer up): the agent's `tool_modes`, `FIM_MCP_TOOL_MODE`, fim.yaml's,
    `progressive`."""
    env = os.environ.get("FIM_MCP_TOOL_MODE", "").strip().lower()
    return agent.tool_modes.mcp or env or snapshot.project.tool_modes.mcp or "progressive"


def _mode_problems(doc: Document, agent: str, servers: list[str], mode: str) -> list[Problem]:
    """A step calling an MCP tool by a name its agent's model does not have in its mode
    (newcomer-54 #3): `<server>__<tool>` in progressive mode (the model has `mcp`), `mcp`
    in legacy mode (it has `<server>__<tool>`). The run answers "there is no tool named"."""
    if not servers:
        return []
    problems: list[Problem] = []
    for at, steps in _step_lists(doc.data):
        for i, step in enumerate(steps):
            for where, call in _call_items(step):
                tool = str(call["name"])
                server = next((s for s in servers if tool.startswith(f"{s}__")), None)
                if mode != "legacy" and server is not None:
                    remote = tool.removeprefix(f"{server}__")
                    message = (
                        f"agent '{agent}' calls MCP tools through `mcp` in {mode} mode: its "
                        f"run answers '{tool}' with 'there is no tool named'"
                    )
                    hint = (
                        "write {name: mcp, arguments: {subcommand: call, server: "
                        f"{server}, tool: {remote}, parameters: {{...}}}}}}, or set "
                        "tool_modes: {mcp: legacy} on the agent"
                    )
                    problems.append(doc.problem((*at, i, *where), message, hint))
                elif mode == "legacy" and tool == "mcp":
                    message = (
                        f"agent '{agent}' calls MCP tools by name in legacy mode "
                        "(`<server>__<tool>`): its run answers 'mcp' with 'there is no tool "
                        "named'"
                    )
                    hint = "write {name: <server>__<tool>, arguments: {...}}, or drop tool_modes"
                    problems.append(doc.problem((*at, i, *where), message, hint))
    return problems


def _unavailable_cause(tool: str, unavailable: list[str]) -> str:
    """`connector 'x' is` (or `connectors 'x', 'y' are`) when `tool` is missing because
    of them, else ""."""
    owners = [c for c in unavailable if tool.startswith(f"{c}__")]
    if not owners and tool in ("connector", "database"):
        owners = unavailable
    if not owners:
        return ""
    quoted = ", ".join(f"'{c}'" for c in owners)
    return f"connector {quoted} is" if len(owners) == 1 else f"connectors {quoted} are"


_Targets = dict[tuple[str, str], tuple[str, dict[str, list[str] | None]]]
"""(meta-tool, argument) -> (what it names, {name: its actions, None when unknown})."""


def _meta_targets(snapshot: Snapshot, agent: AgentDecl, names: set[str]) -> _Targets:
    """What each meta-tool the agent's model can call (`connector`, `database`, `mcp`)
    may name: its HTTP connectors (with their actions), databases and MCP servers. A
    connector unavailable here (an unset `${VAR}`) is known, its actions are not."""
    http: dict[str, list[str] | None] = {}
    databases: dict[str, list[str] | None] = {}
    for name in agent.connectors:
        decl = snapshot.connectors.get(name)
        if isinstance(decl, HttpConnector):
            http[name] = list(decl.actions)
        elif decl is not None:
            databases[name] = None
        elif name in snapshot.unavailable_connectors:
            http[name] = databases[name] = None
    targets: _Targets = {
        ("connector", "connector"): ("HTTP connector", http),
        ("database", "database"): ("database", databases),
        ("mcp", "server"): ("MCP server", dict.fromkeys(agent.mcp)),
    }
    return {key: found for key, found in targets.items() if key[0] in names}


def _meta_problems(doc: Document, agent: str, targets: _Targets) -> list[Problem]:
    """A step's call of a meta-tool naming a connector, database or MCP server the agent
    does not have, or an action its connector does not have: its run answers with an
    error (fine if the script tests that on purpose), so a warning at the name."""
    problems: list[Problem] = []
    for at, steps in _step_lists(doc.data):
        for i, step in enumerate(steps):
            for where, call in _call_items(step):
                args = call.get("arguments")
                if not isinstance(args, dict):
                    continue
                for (tool, key), (what, known) in targets.items():
                    named = args.get(key)
                    if call["name"] != tool or not isinstance(named, str):
                        continue
                    path = (*at, i, *where, "arguments")
                    if named not in known:
                        hint = suggest(named, known, f"{what}s of agent '{agent}'")
                        message = (
                            f"agent '{agent}' has no {what} '{named}': its run answers this "
                            "call with an error (fine if the script tests that on purpose)"
                        )
                        problems.append(doc.problem((*path, key), message, hint))
                    elif known[named] is not None and isinstance(args.get("action"), str):
                        problems += _action_problems(doc, (*path, "action"), named, args, known)
    return problems


def _action_problems(
    doc: Document, path: Path_, connector: str, args: dict[str, Any], known: dict[str, Any]
) -> list[Problem]:
    """The actions a `connector` call names (`discover` takes several, comma-separated)
    that its connector does not have."""
    actions: list[str] = known[connector]
    problems: list[Problem] = []
    for action in (a.strip() for a in str(args["action"]).split(",")):
        if action and action not in actions:
            problems.append(
                doc.problem(
                    path,
                    f"connector '{connector}' has no action '{action}': its run answers this "
                    "call with an error (fine if the script tests that on purpose)",
                    suggest(action, actions, f"actions of '{connector}'"),
                )
            )
    return problems


def _iteration_problems(doc: Document, agent: str, limit: int) -> list[Problem]:
    """A list of steps whose run makes more model calls than `limit`: the calls up to the
    first step that calls no tool (the final answer), or all of them."""
    problems: list[Problem] = []
    for at, steps in _step_lists(doc.data):
        calls = next((i + 1 for i, step in enumerate(steps) if not _calls(step)), len(steps))
        if calls <= limit:
            continue
        message = (
            f"agent '{agent}' has max_iterations: {limit}, and this script's run needs "
            f"{calls} model calls: it stops before this step, without a final answer"
        )
        hint = f"raise max_iterations to {calls} or more in the agent's file, or shorten the script"
        problems.append(doc.problem((*at, limit), message, hint))
    return problems
