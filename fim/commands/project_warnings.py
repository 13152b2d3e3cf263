"""`fim validate`'s warnings: what does not make a project invalid but may surprise its
owner where it serves (a `${VAR}` unset here, a command not installed, an open server
setting, a confirm hook that asks about nothing). Warnings, not problems: the machine
that validates is often not the one that serves; `--strict` fails on them.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from fim.commands.project_adk_evals import adk_eval_files
from fim.config.promptfoo_words import foreign_schema
from fim.config.yamlio import parse, problem_in_file
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl


def warnings_of(snapshot: Snapshot) -> list[Problem]:
    """Every warning of `snapshot`, unmasked (the caller masks what it prints)."""
    return [
        *_unavailable_warnings(snapshot),
        *_sandbox_warnings(snapshot),
        *_server_warnings(snapshot),
        *_confirm_warnings(snapshot),
        *_mcp_command_warnings(snapshot),
        *_hook_command_warnings(snapshot),
        *_script_warnings(snapshot),
        *_model_warnings(snapshot),
        *_modeline_warnings(snapshot),
        *_cassette_warnings(snapshot),
        *_skill_warnings(snapshot),
        *_schema_typo_warnings(snapshot),
        *adk_eval_files(snapshot.root),
        *_case_var_warnings(snapshot),
    ]


def _case_var_warnings(snapshot: Snapshot) -> list[Problem]:
    """Eval cases whose `{{ name }}` no var fills in: a case with no vars, sent literally,
    or an empty CSV cell (`fim.build.case_var_checks`)."""
    if not snapshot.evals:
        return []
    # deferred: only a project with eval suites reads their cases' files again
    from fim.build.case_var_checks import case_var_warnings

    return case_var_warnings(snapshot)


def _schema_typo_warnings(snapshot: Snapshot) -> list[Problem]:
    """Schema keys that JSON Schema ignores but look like a misspelt keyword
    (`fim.build.schema_typos`)."""
    # deferred: only a project with connectors or agent schemas walks them
    from fim.build.schema_typos import schema_typo_warnings

    return schema_typo_warnings(snapshot)


def _skill_warnings(snapshot: Snapshot) -> list[Problem]:
    """Skills' front matter: `allowed-tools` no agent using the skill can load, unknown
    keys, a name not the folder's (`fim.build.skill_checks`)."""
    if not snapshot.skills:
        return []
    # deferred: only a project with skills reads their front matter again
    from fim.build.skill_checks import skill_warnings

    return skill_warnings(snapshot, _model_tools)


def _cassette_warnings(snapshot: Snapshot) -> list[Problem]:
    """Cassettes of no case, or not a recording (`fim.build.cassette_checks`)."""
    if not snapshot.evals:
        return []
    # deferred: only a project with eval suites reads its cassettes (and their names' slug;
    # `fim.eval.cassette_keys`, not `cassettes`, which loads the eval stack)
    from fim.build.cassette_checks import cassette_warnings
    from fim.eval.cassette_keys import slug

    return cassette_warnings(snapshot, slug)


def _modeline_warnings(snapshot: Snapshot) -> list[Problem]:
    """Eval suites whose editor modeline attaches another tool's schema (promptfoo's, kept
    from a ported config: `fim.config.promptfoo_words.foreign_schema`)."""
    found: list[Problem] = []
    for name in snapshot.evals:
        path = snapshot.source("eval", name).path
        try:
            with open(snapshot.root / path, encoding="utf-8", errors="replace") as file:
                problem = foreign_schema(file.read(4096), path)
        except OSError:  # gone since the compile: a race, nothing to warn about
            continue
        found += [problem] if problem is not None else []
    return found


def _model_warnings(snapshot: Snapshot) -> list[Problem]:
    """Model names litellm's table does not list, close to one it does
    (`fim.build.model_checks.model_name_warnings`)."""
    # deferred: the price table is read only when a model of a listed provider is named
    from fim.build.model_checks import model_name_warnings
    from fim.llm import catalog

    return model_name_warnings(snapshot, catalog.table, catalog.listed)


def _script_warnings(snapshot: Snapshot) -> list[Problem]:
    """Scripted models' steps calling a tool their agent's model cannot call, or more than
    its `max_iterations` allows (`fim.build.script_checks`)."""
    if not any("scripted:" in str(m.model) for m in snapshot.models_in_use()):
        return []  # most projects: no script to read
    # deferred: only a project with scripted models needs the tool names (fim.hooks)
    from fim.build.script_checks import script_warnings

    # a step calling an unavailable connector's action says so (`script_checks`' own words)
    return script_warnings(snapshot, lambda s, a: _model_tools(s, a, unavailable=False))


def _model_tools(
    snapshot: Snapshot, agent: AgentDecl, unavailable: bool = True
) -> tuple[set[str], list[str]]:
    """The names `agent`'s model can call: the hook view's of its own tools (not its
    delegates' or workflows' tools, which their runs call), the meta-tools in front of
    them, and the MCP servers whose `<server>__` tools it may call; Claude Code's aliases
    (`Bash`) are hooks' names, not the model's. A connector unavailable here counts with its
    declared actions unless `unavailable` is False (`fim.hooks.targets.hook_targets`)."""
    # deferred: fim.hooks is loaded only for a project with scripted models
    from fim.hooks.claude import NAMES
    from fim.hooks.targets import hook_targets

    own = agent.model_copy(update={"delegates": [], "workflows": []})
    found = hook_targets(snapshot, own, unavailable)
    aliases = {alias for names in NAMES.values() for alias in names}
    names = {n for n in found.names if n not in aliases} | set(found.behind)
    names |= {"call_agent"} if agent.delegates else set()
    names |= {"run_workflow"} if agent.workflows else set()
    return names, found.servers


def _hook_command_warnings(snapshot: Snapshot) -> list[Problem]:
    """Command hooks whose program is not installed here (`uv run x.py` without uv): the
    shell fails it (127) on every call, and a hook that fails blocks the call it guards
    (hooks fail closed), so every call it matches would be refused. Scripts in the project
    are checked by the compile, but for the interpreter their `#!` line names; a program
    found on PATH is left to run."""
    # deferred: only a project with command hooks needs the program check
    from fim.build.hook_checks import command_program
    from fim.build.hook_shebang import missing_interpreter

    found: list[Problem] = []
    seen: set[str] = set()
    for name, agent in snapshot.agents.items():
        for index, hook in enumerate(agent.hooks):
            command = getattr(hook, "command", None)
            if not command:
                continue
            program = command_program(command, snapshot.root)
            if program and "/" in program and program not in seen:
                seen.add(program)
                wrong = missing_interpreter(snapshot.root / program, program)
                if wrong is not None:
                    where = ("hooks", index, "command")
                    found.append(
                        _at_agent(snapshot, name, where, f"agent '{name}': " + wrong[0], wrong[1])
                    )
                continue
            if not program or program in seen or shutil.which(program):
                continue
            if any(c in program for c in "$`;|&<>(){}*?[]~="):
                continue  # the shell's to resolve
            seen.add(program)
            found.append(
                _at_agent(
                    snapshot,
                    name,
                    ("hooks", index, "command"),
                    f"agent '{name}': hook command '{program}' is not installed here: the hook "
                    "fails, and a failing hook blocks every call it matches (hooks fail closed)",
                    f"install {program} where fim runs, or change the hook's command",
                )
            )
    return found


def _at_agent(
    snapshot: Snapshot, agent: str, path: tuple[str | int, ...], message: str, hint: str
) -> Problem:
    """A warning at the value at `path` of an agent's file, where the compile's errors about
    that value point (the `command:` line, not the file's first); at the agent's start when
    its file cannot be read again or has no such value (a race, not a problem of its own)."""
    source = snapshot.source("agent", agent)
    fallback = Problem(source.path, source.line, source.column, message, hint)
    try:
        text = (snapshot.root / source.path).read_text(encoding="utf-8")
        found = parse(text, source.path).problem(path, message, hint)
    except Exception:  # compiled from it: unreadable or unparsable now is a race
        return fallback
    return found if found.line > source.line else fallback


def _unavailable_warnings(snapshot: Snapshot) -> list[Problem]:
    """Connectors and MCP servers whose `${VAR}` is unset here: a warning, since the secret
    is often exported only where fim serves (and CI replays need none); the agents and
    workflows that use one fail when they start, and the warning names them."""
    problems = []
    for what, found in (
        ("connector", snapshot.unavailable_connectors),
        ("MCP server", snapshot.unavailable_mcp),
    ):
        for name, p in ((name, p) for name, unset in found.items() for p in unset):
            message = f"{what} '{name}' is unavailable: {p.message}"
            message += _users(snapshot, name, mcp=what != "connector")
            problems.append(Problem(p.path, p.line, p.column, message, p.hint))
    for name, p in ((n, p) for n, unset in snapshot.unavailable_a2a.items() for p in unset):
        users = [repr(a) for a, d in snapshot.agents.items() if name in d.delegates]
        message = f"remote A2A agent '{name}' is unavailable: {p.message}"
        message += f"; delegated to by {', '.join(users)}, which fail when they start" * bool(users)
        problems.append(Problem(p.path, p.line, p.column, message, p.hint))
    return sorted(problems, key=lambda p: (p.path, p.line, p.column))


def _users(snapshot: Snapshot, name: str, mcp: bool) -> str:
    """`; used by agents 'a', 'b' and workflow 'w', which fail when they start`: the agents
    and workflows that use the connector (or MCP server) `name`; "" when none does."""
    agents = [a for a, d in snapshot.agents.items() if name in (d.mcp if mcp else d.connectors)]
    workflows = []
    for flow, decl in snapshot.workflows.items():
        for node in decl.nodes.values():
            uses = node.uses()
            reached = [s for s, _ in uses.mcp] if mcp else [t.split("__")[0] for t in uses.tools]
            if name in reached:
                workflows.append(flow)
                break
    named = [
        f"{noun}{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}"
        for noun, names in (("agent", agents), ("workflow", workflows))
        if names
    ]
    return f"; used by {' and '.join(named)}, which fail when they start" if named else ""


def _mcp_command_warnings(snapshot: Snapshot) -> list[Problem]:
    """Stdio MCP servers whose `command` is not installed here (`pythn`): the check every
    run of an agent that uses one makes first (`fim.run.preflight.command_problem`), at the
    `command:` line. A warning, as an unset variable is: the machine that validates is
    often not the one that serves; `--strict` fails on it. No process is started."""
    if not snapshot.project.mcp_servers:
        return []
    # deferred: only a project with MCP servers needs the run-time checks
    from fim.run.preflight import command_hint, command_problem

    problems = []
    for name in snapshot.project.mcp_servers:
        if (problem := command_problem(snapshot, name)) is not None:
            path = ("mcp_servers", name, "command")
            problems.append(_at_project(snapshot, path, problem, command_hint(snapshot, name)))
    return problems


def _sandbox_warnings(snapshot: Snapshot) -> list[Problem]:
    """Agents whose python_exec or shell would refuse to run here (no bubblewrap): a warning,
    not an error, since the machine that validates is often not the one that serves."""
    problems = []
    for name, agent in snapshot.agents.items():
        listed = [t for t in agent.tools if t in ("python_exec", "shell")]
        if "compute" in agent.tool_categories and "python_exec" not in listed:
            listed.append("python_exec")
        if not listed:
            continue
        from fim.tools.sandbox import warnings_for  # only when an agent needs the sandbox

        source = snapshot.source("agent", name)
        problems += [
            Problem(source.path, source.line, source.column, message)
            for message in warnings_for(listed)
        ]
    return problems


def _confirm_warnings(snapshot: Snapshot) -> list[Problem]:
    """`confirm` hooks that can ask about no call of their agent: they look like protection
    and never fire (`fim.hooks.builtin.confirm.asks_about_nothing`)."""
    problems = []
    confirms = any(decl.use == "confirm" for decl in snapshot.hooks.values())
    for name, agent in snapshot.agents.items():
        if not any(spec.use == "confirm" or (confirms and spec.ref) for spec in agent.hooks):
            continue  # most agents: no confirm, nothing to load
        # deferred: only for agents with a confirm hook; loads the hooks and the tools
        from fim.hooks.build import resolve
        from fim.hooks.builtin.confirm import asks_about_nothing

        for spec in agent.hooks:
            try:
                hook = resolve(spec, snapshot)
            except Exception:  # a broken ref is reported as an error by the compile
                continue
            if hook.use != "confirm":
                continue
            found = asks_about_nothing(snapshot, agent, hook.with_, hook.matcher)
            if found is not None:
                source = snapshot.source("agent", name)
                problems.append(Problem(source.path, source.line, source.column, *found))
    return problems


def _server_warnings(snapshot: Snapshot) -> list[Problem]:
    """Settings that open a server more than their owner may think."""
    server = snapshot.project.server
    keys = [key if isinstance(key, str) else key.key for key in server.api_keys]
    keyed = any(keys) or any(server.operator_keys)  # an unset ${VAR} is no key...
    # ...unless it is unset only here (CI, a laptop): where fim serves, it must be set
    keyed = keyed or any(
        setting in ("server.api_keys", "server.operator_keys")
        for setting, _ in snapshot.project._serve_only_unset
    )
    found: list[Problem] = []
    if "*" in server.cors_origins and not keyed:
        message = (
            "server.cors_origins lists '*' and the server has no API keys: a page of any web "
            "site its users open can run its agents and decide its approvals"
        )
        found.append(Problem("fim.yaml", 1, 1, message))
    if "*" in server.allowed_hosts and not keyed:
        found.append(
            _at_project(
                snapshot,
                ("server", "allowed_hosts"),
                "server.allowed_hosts lists '*' and the server has no API keys: a web site "
                "that re-points its name at the server (DNS rebinding) can use it",
                "list the names your proxy forwards instead",
            )
        )
    elif server.allow_open and not server.allowed_hosts and not keyed:
        found.append(
            _at_project(
                snapshot,
                ("server", "allow_open"),
                "server.allow_open without server.allowed_hosts: a request whose Host is not "
                "a loopback name is refused (403), the name your proxy forwards too",
                "list the names your proxy forwards in server.allowed_hosts",
            )
        )
    if server.key_budget is not None and not keyed:
        found.append(
            _at_project(
                snapshot,
                ("server", "key_budget"),
                "server.key_budget has no effect: the server has no server.api_keys or "
                "server.operator_keys, and it limits what each key spends",
                "add api_keys, or use `budget:` in fim.yaml to limit every run",
            )
        )
    return found


def _at_project(snapshot: Snapshot, path: tuple[str, ...], message: str, hint: str) -> Problem:
    """A warning at the value at `path` in fim.yaml (`fim.config.yamlio.problem_in_file`)."""
    return problem_in_file(snapshot.root, "fim.yaml", path, message, hint)
