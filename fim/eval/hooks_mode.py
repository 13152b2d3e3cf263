"""Whether `fim eval` runs a suite's target with its hooks, and when it refuses to run
without them (newcomer55 #1).

Hooks are bypassed by default: the contract CI gates rely on (their verdict must not
hang on a human approval or a rate limit, and a cassette replays what was recorded).
What decides, first found: `--with-hooks` / `--without-hooks`; the report `--rerun-failed`
re-runs (a suite that ran with hooks on reruns with them); the suite's `hooks: on|off`;
else bypassed, by default.

Bypassed by default is never dangerous: a case that would execute real tool effects
(`--record`, `--live`, or a scripted case with no cassette, which runs its tools for real)
on an agent declaring a PreToolUse hook (python, command or builtin) that would judge a
tool that is not read-only is refused, before anything runs, at the hook's line, naming
the agent, the hook and the tools. Bypassing on purpose (`--without-hooks`, `hooks:
off`) runs it. Read-only is what the tool declares: a builtin's or a connector action's
`access: read`, a project function marked `@fim.tools.read_only`; an MCP server's tools
are not known before it runs, so they count as writes (as `confirm` counts them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fim.build.builtin_names import is_python_tool, tool_name
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, EvalSuite
from fim.config.yamlio import parse
from fim.errors import FimError
from fim.hooks.build import display_name, instantiate, resolve
from fim.hooks.claude import mcp_alias
from fim.hooks.targets import declared_tools
from fim.tools import builtin
from fim.tools.naming import tool_name as shortened

HooksChoice = bool | Mapping[str, bool] | None
"""`True`/`False`: `--with-hooks`/`--without-hooks`; a mapping: per suite, the hooks mode
of the report `--rerun-failed` re-runs; None: each suite's `hooks:`, else bypassed."""


def suite_hooks(choice: HooksChoice, suite: EvalSuite) -> tuple[bool, bool]:
    """(hooks on, chosen): `chosen` is False when the hooks are bypassed only by default."""
    if isinstance(choice, bool):
        return choice, True
    if choice is not None and suite.name in choice:
        on = choice[suite.name]
        return on, on or suite.hooks == "off"
    if suite.hooks is not None:
        return suite.hooks == "on", True
    return False, False


def report_hooks(path: Path | None) -> dict[str, bool] | None:
    """Per suite, whether the report at `path` ran it with hooks on (`fim eval --json`
    says `"hooks": "on"` or `"bypassed"`); None without a report or when it cannot be read
    (`--rerun-failed` says why itself)."""
    if path is None:
        return None
    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.ci import load

    try:
        report = load(path)
    except FimError:
        return None
    found: dict[str, bool] = {}
    for suite in report.get("suites", []):
        if isinstance(suite, dict) and isinstance(suite.get("name"), str):
            name = suite["name"]
            found[name] = found.get(name, False) or suite.get("hooks") == "on"
    return found


@dataclass(frozen=True)
class Guard:
    """A PreToolUse hook of an agent that would judge tools that are not read-only."""

    agent: str
    hook: str
    where: str
    """`agents/support.yaml:14:5`: the hook's entry."""
    tools: tuple[str, ...]


def guards(snapshot: Snapshot, agent: AgentDecl) -> list[Guard]:
    """The agent's PreToolUse hooks that would judge one of its tools (its delegates'
    calls too: they run under its hooks) that is not read-only."""
    writes = dict(_writes(snapshot, agent, set()))
    found: list[Guard] = []
    for index, spec in enumerate(agent.hooks):
        label = display_name(spec)
        try:
            hook = instantiate(resolve(spec, snapshot), snapshot, label)
        except Exception:  # a hook that cannot build: `fim validate` says why; guard anyway
            hook = None
        if hook is not None and hook.points[0] != "PreToolUse":
            continue  # `audit_log` observes PreToolUse too, and decides nothing there
        judged = [
            shown
            for shown, names in writes.items()
            if hook is None or any(hook.matches(n) for n in names)
        ]
        if judged:
            found.append(Guard(agent.name, label, _hook_at(snapshot, agent, index), tuple(judged)))
    return found


def _hook_at(snapshot: Snapshot, agent: AgentDecl, index: int) -> str:
    """`agents/support.yaml:14:5`: where the agent's hook `index` is written (the snapshot
    keeps no positions: the file is read again, only for a refusal; its start if it
    cannot be)."""
    src = snapshot.source("agent", agent.name)
    line, column = src.line, src.column
    try:
        text = (snapshot.root / src.path).read_text(encoding="utf-8-sig")
        line, column = parse(text, src.path).position(("hooks", index))
    except Exception:  # changed or unreadable since the compile: the agent's own line
        pass
    return f"{src.path}:{line}:{column}"


def _writes(
    snapshot: Snapshot, agent: AgentDecl, seen: set[str]
) -> Iterator[tuple[str, list[str]]]:
    """(shown name, names a matcher may meet) of each tool the agent (or a delegate) can
    call that is not declared read-only."""
    if agent.name in seen:
        return
    seen.add(agent.name)
    for entry in declared_tools(agent):
        if not _reads(snapshot, entry):
            yield tool_name(entry), [tool_name(entry)]
    for name in agent.connectors:
        decl = snapshot.connectors.get(name)
        if decl is None:
            continue
        if decl.kind == "database":
            if not decl.read_only:
                yield f"{name}__query", [f"{name}__query", shortened(name, "query")]
            continue
        for action, spec in decl.actions.items():
            if spec.access != "read":
                yield f"{name}__{action}", [f"{name}__{action}", shortened(name, action)]
    for server in agent.mcp:
        yield f"{server}__*", [f"{server}__tool", mcp_alias(server, "tool")]
    for name in agent.delegates:
        if name in snapshot.agents:
            yield from _writes(snapshot, snapshot.agents[name], seen)


def _reads(snapshot: Snapshot, entry: str) -> bool:
    """Whether the tool `entry` of `tools:` declares `access: read` (unknown: a write)."""
    try:
        if is_python_tool(entry):
            # deferred: the project's Python is imported only for an agent under a guard
            from fim.hooks.python_hooks import load_module
            from fim.tools.python_tools import resolve as resolve_tool

            tool: Any = resolve_tool(snapshot, entry, load_module)
        else:
            tool = builtin.load(entry)  # a builtin built per run (`make(ctx)`) counts as a write
    except Exception:
        return False
    return (getattr(tool, "metadata", None) or {}).get("access") == "read"


def refusal(
    snapshot: Snapshot, suite: EvalSuite, effects: str, cache: dict[str, Any]
) -> str | None:
    """Why a case of `suite` that would run `effects` (`--record`, ...) with hooks bypassed
    by default is refused, or None (no guard of its target would judge a write). `cache`:
    the guards found per agent, for the run."""
    names = [suite.agent] if suite.agent is not None else []
    workflow = snapshot.workflows.get(suite.workflow or "")
    for node in workflow.nodes.values() if workflow is not None else ():
        names += node.uses().agents
    found: list[Guard] = []
    for name in dict.fromkeys(names):
        agent = snapshot.agents.get(name)
        if agent is None:
            continue
        if name not in cache:
            cache[name] = guards(snapshot, agent)
        found += cache[name]
    if not found:
        return None
    first, source = found[0], snapshot.source("eval", suite.name)
    also = ", ".join(f"{g.hook} at {g.where}" for g in found[1:])
    return (
        f"{first.where}: agent '{first.agent}' declares the PreToolUse hook {first.hook}, "
        f"which would judge {', '.join(first.tools)} (not read-only), and {effects} with "
        "hooks bypassed by default: refused"
        + (f" (also guarded by {also})" if also else "")
        + f" (`fim eval --with-hooks`, or `hooks: on` in {source.path}, runs the agent as "
        "deployed; `--without-hooks`, or `hooks: off`, bypasses its hooks on purpose)"
    )


def effects_of(mode: str, recorded: bool, case: str) -> str | None:
    """What of a case would run for real: `--record` and `--live` run every tool call, a
    case replayed without a cassette (its models scripted: a real one is skipped) too."""
    if mode == "record":
        return "`fim eval --record` would run its tool calls for real"
    if mode == "live":
        return "`fim eval --live` would run its tool calls for real"
    if not recorded:
        return f"case '{case}' has no cassette, so its scripted tool calls would run for real"
    return None


__all__ = ["Guard", "HooksChoice", "effects_of", "guards", "refusal", "report_hooks", "suite_hooks"]
