"""Claude Code's tool names in fim's words, for the messages that meet them in a file fim
reads: a subagent's `tools:` (`fim.config.claude_subagent`) and an agent's `tools:` check
(`fim.build.builtin_names`). The same table as a skill's `allowed-tools` mapping
(`fim.run.skills`) and the inverse of the hook matchers' aliases (`fim.hooks.claude`), kept
at the config layer so the checks below the run layer can read it.
"""

from __future__ import annotations

import re

CLAUDE_TOOLS = {
    "Bash": "shell",
    "Read": "file_ops",
    "Write": "file_ops",
    "Edit": "file_ops",
    "MultiEdit": "file_ops",
    "LS": "file_ops",
    "Glob": "file_ops",
    "Grep": "file_ops",
    "WebFetch": "web_fetch",
}
"""Claude Code tool -> the fim builtin that does its work."""

READS_PROJECT = frozenset({"Read", "Grep", "Glob", "LS"})
"""Claude Code tools that read the repository: fim's `file_ops` sees only the sandbox
folder, so the repository is read by `shell` with `sandbox: {project: read}` (`/project`)."""

REPOSITORY_NOTE = (
    "file_ops sees only the sandbox folder: to read the repository, give the agent shell "
    "and sandbox: {project: read}, which shows it at /project"
)


_ALLOWED_ENTRY = re.compile(r"([A-Za-z_][\w.-]*)(\([^)]*\))?")


def allowed_tool_entries(text: str) -> list[str]:
    """The entries of one `allowed-tools` text in Claude's syntax (`Bash(git:*), Read` or
    `Bash(code *) Read`), each kept whole with its parenthesised pattern: read by the skill
    loader (`fim.run.skills`) and by validate's skill checks (`fim.build.skill_checks`)."""
    return [match.group(0).strip() for match in _ALLOWED_ENTRY.finditer(text)]


def fim_tool_of(entry: str) -> str | None:
    """The fim tool an `allowed-tools` entry maps to (`Bash(git:*)` -> `shell`), or None
    when fim has no equivalent; fim's own names map to themselves."""
    name = entry.split("(", 1)[0]
    return CLAUDE_TOOLS.get(name) or (name if "_" in name or name.islower() else None)


def fim_tool(name: str) -> str | None:
    """The fim builtin Claude Code's tool `name` maps to, or None."""
    return CLAUDE_TOOLS.get(name)


def claude_tool_hint(name: str) -> str | None:
    """`Claude Code's Bash is fim's shell` for one of Claude Code's tool names, else None."""
    fim = CLAUDE_TOOLS.get(name)
    if fim is None:
        return None
    hint = f"Claude Code's {name} is fim's {fim}"
    return f"{hint}; {REPOSITORY_NOTE}" if name in READS_PROJECT else hint


__all__ = [
    "CLAUDE_TOOLS",
    "READS_PROJECT",
    "REPOSITORY_NOTE",
    "allowed_tool_entries",
    "claude_tool_hint",
    "fim_tool",
    "fim_tool_of",
]
