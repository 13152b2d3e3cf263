"""What a Claude Code user keeps in a project and fim does not read: `fim validate`'s
warnings for `.claude/settings.json` hooks, subagent Markdown files, `.claude/skills/` and
`.mcp.json` servers (each was silently ignored: validate said ok and the guard hook never
ran). Their own module: a concern of the newcomer's first hour, apart from loading.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from fim.config.files import read_regular
from fim.config.schema import Project
from fim.config.schema.project import McpServer
from fim.config.yamlio import Document, parse
from fim.errors import Problem

log = logging.getLogger(__name__)

CLAUDE_SKILLS = ".claude/skills"
"""Where Claude Code keeps a project's skills (SKILL.md folders, the format fim reads)."""


def claude_code_files(root: Path, project: Project) -> list[Problem]:
    """Warnings for what a Claude Code user puts in a project and fim does not read, one
    per kind, at the file: settings.json hooks, subagent Markdown files, `.claude/skills/`,
    `.mcp.json` servers. Silently ignored, each looked like it worked (`fim validate` said
    ok and the guard hook never ran). Warnings, not problems: a repository developed with
    Claude Code keeps its `.claude/` for Claude Code itself. Nothing here fails: a file
    that cannot be read, parsed or understood, or that links out of the project, is simply
    not reported (a hostile `.claude/` file turned CI's validate red with a traceback, and
    a link out of the project printed what it pointed at: attack-39)."""
    checks: list[Callable[[], list[Problem]]] = [
        *(functools.partial(_claude_settings, root, name) for name in _SETTINGS),
        *(
            functools.partial(_subagent_files, root, folder)
            for folder in dict.fromkeys([project.paths.agents, ".claude/agents"])
        ),
        functools.partial(_claude_skills, root, project),
        functools.partial(_mcp_json, root, project),
    ]
    found: list[Problem] = []
    for check in checks:
        try:
            found += check()
        except Exception:  # a nicety about files fim does not read: never a failure
            log.debug("checking Claude Code's files failed", exc_info=True)
    return found


_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")


def _inside(root: Path, rel: str) -> bool:
    """Whether `rel` (a file or folder of the project) resolves inside the project: a link
    out of it is not the project's to report."""
    real = os.path.realpath(root / rel)
    top = os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def _json_file(root: Path, rel: str) -> tuple[Any, Document | None]:
    """The data of a JSON file of the project (None when missing or not JSON), and its YAML
    document for positions when the YAML parser reads it too (JSON indented with tabs is
    not YAML: positions are then 1:1)."""
    if not _inside(root, rel):
        return None, None
    try:
        text = read_regular(root / rel, 2**20, follow_links=False)[0].decode("utf-8-sig")
        data = json.loads(text)
    except (OSError, ValueError, RecursionError):
        return None, None
    try:
        doc: Document | None = parse(text, rel)
    except Exception:  # a position is a nicety: the warning stands without one
        doc = None
    return data, doc


def _at(doc: Document | None, rel: str, key: str, message: str, hint: str) -> Problem:
    if doc is None:
        return Problem(rel, 1, 1, message, hint)
    return doc.problem((key,), message, hint, key=True)


def _claude_settings(root: Path, rel: str) -> list[Problem]:
    """A settings.json with `hooks`: the hint is the same hooks in fim's list form, as
    `fim validate` answers that block pasted into an agent (`fim.config.claude_hooks`),
    each command shown as `...`: a command may hold a token, and masking knows only the
    project's `${VAR}` values (the hint is about the shape)."""
    data, doc = _json_file(root, rel)
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if not isinstance(hooks, dict) or not hooks:
        return []
    # deferred: only a project with Claude Code hooks needs the shape converter
    from fim.config.claude_hooks import pasted_claude_hooks

    shape = pasted_claude_hooks(
        {"type": "list_type", "loc": ("hooks",), "msg": "", "input": _unsaid(hooks)},
        ("hooks",),
        "",
    )
    listed = f", {shape[1]}" if shape is not None and shape[1] else ""
    hint = f"paste them into an agent's hooks: as a list{listed}"
    return [_at(doc, rel, "hooks", "Claude Code hooks are not read by fim", hint)]


def _unsaid(value: Any) -> Any:
    """`value` with every hook `command` (a string under that key) replaced by `...`."""
    if isinstance(value, dict):
        return {
            k: "..." if k == "command" and isinstance(v, str) else _unsaid(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_unsaid(item) for item in value]
    return value


def _subagent_files(root: Path, folder: str) -> list[Problem]:
    """Markdown files with front matter (Claude Code subagents: name, description, tools,
    model, the body as the prompt) in the agents folder or `.claude/agents/`: one warning,
    at the first, naming how many."""
    if not _inside(root, folder):
        return []
    try:
        names = sorted(e.name for e in os.scandir(root / folder) if e.name.endswith(".md"))
    except OSError:
        return []
    files = []
    for name in names:
        try:
            head = read_regular(root / folder / name, 2**20, follow_links=False)[0][:4]
        except OSError:
            continue
        if head.startswith(b"---"):
            files.append(posixpath.join(posixpath.normpath(folder), name))
    if not files:
        return []
    more = f" (and {len(files) - 1} more: {', '.join(files[1:4])})" if len(files) > 1 else ""
    return [
        Problem(
            files[0],
            1,
            1,
            f"not an agent file: a Claude Code subagent is not loaded by fim{more}",
            "fim agents are agents/<name>.yaml: the front matter's name, description, tools "
            "and model as keys, the Markdown body as `instructions:`",
        )
    ]


def _claude_skills(root: Path, project: Project) -> list[Problem]:
    """`.claude/skills/<name>/SKILL.md` folders when `paths.skills` does not name
    `.claude/skills`: the same format fim reads, from a folder it does not look in."""
    if CLAUDE_SKILLS in project.paths.skill_folders or not _inside(root, CLAUDE_SKILLS):
        return []
    try:
        skills = [
            e.name
            for e in os.scandir(root / CLAUDE_SKILLS)
            if e.is_dir() and (Path(e.path) / "SKILL.md").is_file()
        ]
    except OSError:
        return []
    if not skills:
        return []
    both = [*project.paths.skill_folders, CLAUDE_SKILLS]
    n = len(skills)
    return [
        Problem(
            f"{CLAUDE_SKILLS}/",
            1,
            1,
            f"{n} skill{'' if n == 1 else 's'} fim does not load: {', '.join(sorted(skills)[:3])}"
            f"{', ...' if n > 3 else ''}",
            f"set paths: {{skills: [{', '.join(both)}]}} in fim.yaml to load them",
        )
    ]


def _mcp_json(root: Path, project: Project) -> list[Problem]:
    """`.mcp.json` servers fim.yaml does not declare under `mcp_servers:`; the hint says
    whether its entries validate as fim's as they are (they do: `type: stdio|http|sse`)."""
    data, doc = _json_file(root, ".mcp.json")
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        return []
    missing = [name for name in servers if name not in project.mcp_servers]
    if not missing:
        return []
    adapter: TypeAdapter[Any] = TypeAdapter(McpServer)
    rejected = []
    for name in missing:
        try:
            adapter.validate_python(servers[name])
        except (ValidationError, ValueError):
            rejected.append(name)
    if rejected:
        fits = f"; fim rejects {', '.join(rejected[:3])} as it is: `fim validate` says why"
    else:
        fits = ", the entries are accepted as they are"
    n = len(missing)
    return [
        _at(
            doc,
            ".mcp.json",
            "mcpServers",
            f"{n} MCP server{'' if n == 1 else 's'} not declared: {', '.join(missing[:3])}"
            f"{', ...' if n > 3 else ''}",
            f"copy mcpServers into fim.yaml's mcp_servers:{fits}",
        )
    ]


__all__ = ["CLAUDE_SKILLS", "claude_code_files"]
