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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from fim.config.declarations import PROJECT_FILE
from fim.config.files import read_regular
from fim.config.schema import Project
from fim.config.schema.project import McpServer
from fim.config.yamlio import Document, parse
from fim.errors import Problem

log = logging.getLogger(__name__)

CLAUDE_SKILLS = ".claude/skills"
"""Where Claude Code keeps a project's skills (SKILL.md folders, the format fim reads)."""


def claude_code_files(
    root: Path, project: Project, agents: Mapping[str, Any] | None = None
) -> list[Problem]:
    """Warnings for what a Claude Code user puts in a project and fim does not read, one
    per kind, at the file: settings.json hooks, subagent Markdown files, `.claude/skills/`,
    `.mcp.json` servers. Silently ignored, each looked like it worked (`fim validate` said
    ok and the guard hook never ran). Warnings, not problems: a repository developed with
    Claude Code keeps its `.claude/` for Claude Code itself. Nothing here fails: a file
    that cannot be read, parsed or understood, or that links out of the project, is simply
    not reported (a hostile `.claude/` file turned CI's validate red with a traceback, and
    a link out of the project printed what it pointed at: attack-39). What was followed
    is not warned about again: hooks whose every command an agent in `agents` runs, a
    subagent an agent of its name replaces."""
    agents = agents or {}
    checks: list[Callable[[], list[Problem]]] = [
        *(functools.partial(_claude_settings, root, name, agents) for name in _SETTINGS),
        *(
            functools.partial(_subagent_files, root, folder, agents)
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


def _claude_settings(root: Path, rel: str, agents: Mapping[str, Any]) -> list[Problem]:
    """A settings.json with `hooks`: the hint is the same hooks in fim's list form, as
    `fim validate` answers that block pasted into an agent (`fim.config.claude_hooks`),
    each command shown as `...`: a command may hold a token, and masking knows only the
    project's `${VAR}` values (the hint is about the shape)."""
    data, doc = _json_file(root, rel)
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if not isinstance(hooks, dict) or not hooks:
        return []
    # deferred: only a project with Claude Code hooks needs the shape converter
    from fim.config.claude_hooks import commands_of, pasted_claude_hooks, unsupported

    pasted = {
        hook.command
        for agent in agents.values()
        for hook in getattr(agent, "hooks", None) or []
        if getattr(hook, "command", None)
    }
    if not set(commands_of(hooks)) - pasted and not unsupported(hooks):
        return []  # every hook is an agent's now

    shape = pasted_claude_hooks(
        {"type": "list_type", "loc": ("hooks",), "msg": "", "input": hooks},
        ("hooks",),
        "",
        masked=True,
    )
    listed = f", {shape[1]}" if shape is not None and shape[1] else ""
    hint = f"paste them into an agent's hooks: as a list{listed}"
    if shape is not None and shape[1] and 'command: "..."' in shape[1]:
        hint += (
            "; a \"...\" command: copy its JSON string with the double quotes (in '...' YAML "
            'keeps \\n and \\" as typed, and a command starting with # becomes one comment)'
        )
    return [_at(doc, rel, "hooks", "Claude Code hooks are not read by fim", hint)]


def _subagent_files(root: Path, folder: str, agents: Mapping[str, Any]) -> list[Problem]:
    """Markdown files with front matter (Claude Code subagents: name, description, tools,
    model, the body as the prompt) in the agents folder or `.claude/agents/`: one warning,
    at the first, naming how many."""
    if not _inside(root, folder):
        return []
    files = []
    for name in _markdown_files(root / folder):
        try:
            head = read_regular(root / folder / name, 2**20, follow_links=False)[0][:4]
        except OSError:
            continue
        if head.startswith(b"---") and Path(name).stem not in agents:  # not yet rewritten
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


_MAX_ENTRIES = 2000
"""Entries of an agents folder looked at, subfolders included: a warning, not an inventory."""


def _markdown_files(folder: Path) -> list[str]:
    """`.md` files of `folder` and its subfolders (paths relative to it, sorted, hidden
    folders and links to folders skipped): Claude Code reads subagents from subfolders too
    (disler/claude-code-hooks-mastery keeps 13 of its 19 in `.claude/agents/crypto/` and
    `team/`, and the warning counted 4)."""
    found: list[str] = []
    seen = 0
    for base, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        seen += len(dirs) + len(names)
        rel = Path(base).relative_to(folder).as_posix()
        found += [posixpath.join(rel, n) if rel != "." else n for n in names if n.endswith(".md")]
        if seen > _MAX_ENTRIES:
            break
    return sorted(found, key=lambda n: (n.count("/"), n))


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
    declared = set(project.mcp_servers) | _declared_mcp(root)
    missing = [name for name in servers if name not in declared]
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


def _declared_mcp(root: Path) -> set[str]:
    """The `mcp_servers:` names written in fim.yaml: the snapshot's project leaves out a
    server whose `${VAR}` is unset here, and .mcp.json's entries pasted as the hint says
    (claude-code-showcase: 7 of its 8 need a token) were still called "not declared"."""
    data, _ = _yaml_file(root, PROJECT_FILE)
    servers = data.get("mcp_servers") if isinstance(data, dict) else None
    return {str(name) for name in servers} if isinstance(servers, dict) else set()


def _yaml_file(root: Path, rel: str) -> tuple[Any, Document | None]:
    """The data of a YAML file of the project (None when missing or unreadable)."""
    if not _inside(root, rel):
        return None, None
    try:
        text = read_regular(root / rel, 2**20, follow_links=False)[0].decode("utf-8-sig")
        doc = parse(text, rel)
    except Exception:  # fim.yaml's own problems are the loader's to report
        return None, None
    return doc.data, doc


__all__ = ["CLAUDE_SKILLS", "claude_code_files"]
