"""`fim validate`'s warnings about a skill's front matter (skills/<name>/SKILL.md).

`allowed-tools: [calculater]`, `allowed_tool: x` and `name: getting-startd` all loaded
silently: `read_skill` then told the model the skill expects a tool no agent has, the
misspelt key was ignored, and the skill showed under another title (newcomer-53 #15).
Each is a warning at its line, with a did-you-mean: an `allowed-tools` entry that no agent
using the skill can load (against those agents' tools), a key neither fim, the Agent Skills
format nor Claude Code reads, and a `name` that is not the folder's. Warnings, not errors:
a skill folder written for Claude Code must keep loading; `--strict` fails on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.config.claude_tools import allowed_tool_entries, fim_tool_of
from fim.config.suggestions import suggest
from fim.config.yamlio import Document, parse
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Skill, Snapshot
    from fim.config.schema import AgentDecl

ModelTools = Callable[["Snapshot", "AgentDecl"], tuple[set[str], list[str]]]
"""The names an agent's model can call and its MCP servers (`fim validate`'s, a layer up)."""

KNOWN_KEYS = frozenset(
    {
        # fim, and the Agent Skills format (agentskills.io)
        "name",
        "description",
        "allowed-tools",
        "license",
        "compatibility",
        "metadata",
        # Claude Code's own
        "when_to_use",
        "argument-hint",
        "disable-model-invocation",
        "user-invocable",
        "model",
        "effort",
        "context",
        "agent",
        "hooks",
        "paths",
        "shell",
        "version",
    }
)
"""Front-matter keys fim, the Agent Skills format or Claude Code read; fim uses the first
three and keeps the others, so a public skill loads unchanged."""


def skill_warnings(snapshot: Snapshot, model_tools: ModelTools) -> list[Problem]:
    """Every warning of every skill's front matter, at its line."""
    found: list[Problem] = []
    for name, skill in sorted(snapshot.skills.items()):
        doc = _front_matter(snapshot.root, skill)
        if doc is None or not isinstance(doc.data, dict):
            continue  # changed since the compile: a race, nothing to warn about
        found += _key_warnings(doc, name)
        found += _name_warnings(doc, name)
        users = [
            agent
            for agent in snapshot.agents.values()
            if agent.skills == "all" or name in agent.skills
        ]
        if users:
            found += _tool_warnings(snapshot, doc, name, users, model_tools)
    return found


def _front_matter(root: Path, skill: Skill) -> Document | None:
    """SKILL.md's front matter, parsed with the lines of the file."""
    path = skill.directory / "SKILL.md"
    try:
        rel = path.relative_to(root).as_posix()
        lines = path.read_text(encoding="utf-8").split("\n")
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() == "---")
        return parse("\n".join(lines[1:end]), rel, line_offset=1)
    except Exception:  # read and parsed by the compile: anything now is a race
        return None


def _key_warnings(doc: Document, skill: str) -> list[Problem]:
    found = []
    for key in doc.data:
        if isinstance(key, str) and key not in KNOWN_KEYS:
            close = suggest(key.replace("_", "-"), KNOWN_KEYS) or ""
            hint = close if close.startswith("did you mean") else None
            message = (
                f"skill '{skill}': front-matter key '{key}' is not one fim, the Agent Skills "
                "format or Claude Code reads; it is ignored"
            )
            found.append(doc.problem((key,), message, hint, key=True))
    return found


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _name_warnings(doc: Document, skill: str) -> list[Problem]:
    """`name:` another than the folder's: fim and agents know the skill by its folder, the
    Agent Skills format wants both equal. A title of the folder's words (`Hook Development`
    in `hook-development/`, as Claude Code plugins write) is no mistake."""
    name = doc.data.get("name")
    if not isinstance(name, str) or not name.strip() or _slug(name) == _slug(skill):
        return []
    return [
        doc.problem(
            ("name",),
            f"skill '{skill}': name '{name}' differs from its folder, '{skill}', the name "
            "agents list and the model calls it by (the Agent Skills format wants them equal)",
            f"write name: {skill}, or rename the folder to {_slug(name)}",
        )
    ]


def _entries(value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """(path, entry) of each `allowed-tools` entry: a list item's own path, a string's."""
    items: list[tuple[tuple[str | int, ...], Any]] = (
        [(("allowed-tools",), value)]
        if isinstance(value, str)
        else [(("allowed-tools", i), item) for i, item in enumerate(value or ())]
    )
    return [(where, entry) for where, item in items for entry in allowed_tool_entries(str(item))]


def _tool_warnings(
    snapshot: Snapshot, doc: Document, skill: str, users: list[AgentDecl], model_tools: ModelTools
) -> list[Problem]:
    """`allowed-tools` entries no agent using the skill can load (`read_skill` loads an
    entry's fim tool when the agent has it; Claude Code's names map to fim's builtins)."""
    value = doc.data.get("allowed-tools")
    if not value or not isinstance(value, str | list):
        return []
    names: set[str] = set()
    servers: list[str] = []
    for agent in users:
        own, mcp = model_tools(snapshot, agent)
        names |= own
        servers += mcp
    found = []
    for where, entry in _entries(value):
        tool = fim_tool_of(entry)
        if tool is None or tool in names:
            continue  # a Claude Code tool fim has no equivalent of: nothing to load
        if any(tool.startswith((f"{s}__", f"mcp__{s}__")) for s in servers):
            continue  # an MCP server's tool: known once the server runs
        agents = ", ".join(sorted(a.name for a in users))
        shown = f"'{entry}' (fim's {tool})" if tool != entry else f"'{tool}'"
        close = suggest(tool, names, "tools") or ""
        hint = close if close.startswith("did you mean") else f"their tools: {_listed(names)}"
        message = (
            f"skill '{skill}': allowed-tools names {shown}, which no agent using the skill "
            f"({agents}) can load; read_skill loads nothing for it"
        )
        found.append(_at_entry(doc, doc.problem(where, message, hint), entry))
    return found


def _at_entry(doc: Document, problem: Problem, entry: str) -> Problem:
    """`problem` at the column of `entry` on its line (`allowed-tools: Read Grep` is one
    scalar), when the line has it there."""
    lines = doc.text.split("\n")
    row = problem.line - 1 - doc.line_offset
    at = lines[row].find(entry, problem.column - 1) if 0 <= row < len(lines) else -1
    if at < 0:
        return problem
    return Problem(problem.path, problem.line, at + 1, problem.message, problem.hint)


def _listed(names: set[str]) -> str:
    shown = sorted(n for n in names if n)
    return ", ".join(shown[:12]) + (", ..." if len(shown) > 12 else "") or "none"


__all__ = ["KNOWN_KEYS", "skill_warnings"]
