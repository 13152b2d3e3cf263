"""A Claude Code subagent (`.claude/agents/x.md`: front matter `name`, `description`,
`tools`, `model`, the Markdown body as its prompt) in fim's words: the agent file to write,
for `fim validate`'s warning about it (`fim.config.claude_files`).

Told only "the front matter's keys as keys", a newcomer met four errors in a row: `tools:
Read, Grep, Glob, Bash` is a comma string (fim wants a list), `Read` / `Bash` are Claude
Code's tool names, `model: sonnet` is Claude Code's alias, and a reviewer's `Read` of the
repository needs `shell` with `sandbox: {project: read}` (`file_ops` sees only the sandbox
folder). The hint now shows the converted agent, as validate does for a pasted
settings.json `hooks:` block.
"""

from __future__ import annotations

import re
from typing import Any

from fim.config.claude_hooks import yaml_string
from fim.config.claude_tools import CLAUDE_TOOLS, READS_PROJECT, REPOSITORY_NOTE
from fim.config.yamlio import parse

CLAUDE_MODELS = ("sonnet", "opus", "haiku", "inherit")
"""Claude Code's model aliases in a subagent's `model:`."""
_KEY = re.compile(r"^([A-Za-z_][\w-]*):\s*(.*)$")
_LONG = 100
"""A description longer than this is shown cut (the hint is one line)."""


def front_matter(text: str) -> tuple[dict[str, Any], int] | None:
    """(front matter, line the body starts at) of a Markdown file that opens with `---`,
    else None. Read leniently, key by key, when it is not YAML: Claude Code's own examples
    put `Context: ...` and `<example>` inside a plain `description:`."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        return None
    head = "\n".join(lines[1:end])
    data: Any = None
    try:
        data = parse(head, "front matter").data
    except Exception:  # not YAML: read `key: value` lines below
        data = None
    if not isinstance(data, dict):
        data = {}
        for line in lines[1:end]:
            match = _KEY.match(line)
            if match is not None:
                data[match.group(1)] = match.group(2).strip()
    return data, end + 2


def tool_names(value: Any) -> list[str]:
    """A subagent's `tools:` as names: a list, or Claude Code's comma string."""
    items = value if isinstance(value, list) else re.split(r"[,\s]+", str(value or ""))
    return [str(item).strip() for item in items if str(item).strip()]


def _model(value: Any, roles: list[str]) -> tuple[str | None, str | None]:
    """(fim `model:` value, note) for a subagent's `model:`."""
    if not isinstance(value, str) or not value.strip():
        return None, None
    value = value.strip()
    role = "general" if "general" in roles or not roles else roles[0]
    if value in CLAUDE_MODELS:
        listed = ", ".join(roles) or "general"
        return role, (
            f"'{value}' is Claude Code's model alias: fim's models are fim.yaml's model roles "
            f"({listed}), or a litellm string such as anthropic/claude-sonnet-4-5"
        )
    if value.startswith("claude-"):
        return f"anthropic/{value}", None
    return value, None


def converted(text: str, target: str, roles: list[str]) -> str | None:
    """The hint for a subagent's Markdown `text`: the fim agent file `target` to write, in
    YAML flow form, and notes for what has no one-to-one equivalent; None when `text` has
    no front matter."""
    found = front_matter(text)
    if found is None:
        return None
    meta, body = found
    parts: list[str] = []
    notes: list[str] = []
    description = str(meta.get("description") or "").strip()
    if description:
        shown = description if len(description) <= _LONG else description[:60].rstrip() + "..."
        parts.append(f"description: {yaml_string(shown)}")
    model, note = _model(meta.get("model"), roles)
    if model is not None:
        parts.append(f"model: {model}")
    notes += [note] if note else []
    if "tools" in meta:
        names = tool_names(meta.get("tools"))
        parts_, notes_ = _tools(names)
        parts += parts_
        notes += notes_
        if isinstance(meta.get("tools"), str):
            notes.append("tools: is a YAML list in fim, not a comma string")
    notes.append(f"the Markdown body (line {body} on) goes under instructions: |")
    return f"write {target}: {{{', '.join(parts)}}}; " + "; ".join(notes)


def _tools(names: list[str]) -> tuple[list[str], list[str]]:
    """(agent keys, notes) for a subagent's `tools:`, an allow-list in Claude Code: the
    agent gets no more than it names (attack-59 F4: a read-only reviewer with one MCP tool
    was hinted file writes and every tool of the server). Only readers: `read_only: true`.
    A single MCP tool (`mcp__srv__lookup`) has no fim equivalent (`mcp:` grants a whole
    server): it is left out, saying so; `mcp__srv` (Claude Code's "every tool of srv") is
    `mcp: [srv]`."""
    parts: list[str] = []
    notes: list[str] = []
    mapped = list(dict.fromkeys(CLAUDE_TOOLS[n] for n in names if n in CLAUDE_TOOLS))
    servers = list(dict.fromkeys(s for s in map(_whole_server, names) if s is not None))
    single = [
        n for n in names if _mcp(n) and _whole_server(n) is None and _server(n) not in servers
    ]
    unknown = [n for n in names if n not in CLAUDE_TOOLS and not _mcp(n)]
    read_only = all(n in READERS for n in names if n in CLAUDE_TOOLS)
    parts.append(f"tools: [{', '.join(mapped)}]")
    if servers:
        parts.append(f"mcp: [{', '.join(servers)}]")
    if read_only:
        parts.append("read_only: true")
    if READS_PROJECT & set(names):
        if "Bash" in names:
            parts.append("sandbox: {project: read}")
            notes.append(
                "file_ops sees only the sandbox folder: shell reads the repository at /project"
            )
        elif read_only:
            notes.append(
                "file_ops sees only the sandbox folder, not the repository (reading it at "
                "/project takes shell, which read_only: true blocks)"
            )
        else:
            parts.append("sandbox: {project: read}")
            notes.append(REPOSITORY_NOTE)
    if read_only and servers:
        notes.append(
            f"read_only: true also blocks the tools of {', '.join(servers)} not marked read-only"
        )
    if single:
        notes.append(
            f"left out {', '.join(single)}: fim's mcp: grants every tool of a server and "
            "cannot name one (add the server to mcp: only if all of its tools may be called)"
        )
    if unknown:
        notes.append(f"no fim tool for {', '.join(unknown)}")
    return parts, notes


READERS = frozenset({"Read", "Grep", "Glob", "LS", "WebFetch"})
"""Claude Code tools that only read: a subagent with no other of Claude Code's tools
becomes a `read_only: true` agent (`readonly_guard`: file_ops reads only, no shell)."""


def _mcp(name: str) -> bool:
    return name.startswith("mcp__") and len(name.split("__")) >= 2 and bool(name.split("__")[1])


def _server(name: str) -> str:
    return name.split("__")[1]


def _whole_server(name: str) -> str | None:
    """`srv` for Claude Code's names of every tool of a server (`mcp__srv`, `mcp__srv__*`),
    else None."""
    if not _mcp(name):
        return None
    pieces = name.split("__", 2)
    return pieces[1] if len(pieces) == 2 or pieces[2] == "*" else None


__all__ = ["CLAUDE_MODELS", "READERS", "converted", "front_matter", "tool_names"]
