"""What a Claude Code user keeps in a project and fim does not read: `fim validate`'s
warnings for `.claude/settings.json` hooks, subagent Markdown files, `.claude/skills/`,
`.mcp.json` servers and a CLAUDE.md / AGENTS.md no agent includes (each was silently
ignored: validate said ok and the guard hook never ran). Their own module: a concern of
the newcomer's first hour, apart from loading.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import posixpath
import re
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
        *(functools.partial(_claude_settings, root, n, agents, project) for n in _SETTINGS),
        *(
            functools.partial(_subagent_files, root, folder, agents, project)
            for folder in dict.fromkeys([project.paths.agents, ".claude/agents"])
        ),
        functools.partial(_claude_skills, root, project),
        functools.partial(_mcp_json, root, project),
        functools.partial(_memory_files, root, agents),
    ]
    found: list[Problem] = []
    for check in checks:
        try:
            found += check()
        except Exception:  # a nicety about files fim does not read: never a failure
            log.debug("checking Claude Code's files failed", exc_info=True)
    return found


_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")


def _memory_files(root: Path, agents: Mapping[str, Any]) -> list[Problem]:
    """CLAUDE.md / AGENTS.md no agent includes, `@path` imports in one that is included
    (`fim.config.claude_memory`)."""
    # deferred: only a project with a CLAUDE.md or AGENTS.md needs the check
    from fim.config.claude_memory import MEMORY_FILES, memory_files

    if not any((root / name).is_file() for name in MEMORY_FILES):
        return []
    return memory_files(root, agents)


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


def _claude_settings(
    root: Path, rel: str, agents: Mapping[str, Any], project: Project
) -> list[Problem]:
    """A settings.json with `hooks`: the hint is the hooks no agent runs yet in fim's list
    form, as `fim validate` answers that block pasted into an agent
    (`fim.config.claude_hooks`), each command shown as `"..."`: a command may hold a token,
    and masking knows only the project's `${VAR}` values (the hint is about the shape); and
    copied with its double quotes, as the README says. Once every hook of an event fim runs
    is an agent's (the same command), nothing is said: the team keeps the file for Claude
    Code, and its events fim does not run were named the first time (the warning stayed
    on every validate). Partly followed, the message counts what is where."""
    data, doc = _json_file(root, rel)
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if not isinstance(hooks, dict) or not hooks:
        return []
    # deferred: only a project with Claude Code hooks needs the shape converter
    from fim.config.claude_hooks import commands_of, pasted_claude_hooks, unsupported

    declared = _declared_hooks(root, project, agents)
    commands = commands_of(hooks)
    missing = [c for c in commands if c.strip() not in declared]
    others = unsupported(hooks)
    if (commands and not missing) or (not commands and not others):
        return []  # every hook fim can run is an agent's now
    message = "Claude Code hooks are not read by fim"
    if len(missing) < len(commands):
        files = sorted({declared[c.strip()] for c in commands if c.strip() in declared})
        total = len(commands) + sum(_count(hooks[e]) for e in others)
        done = len(commands) - len(missing)
        message += f" ({done} of {total} are in {', '.join(files[:3])}; {len(missing)} not yet"
        message += f"; {total - len(commands)} use events fim does not support)" if others else ")"
    shape = pasted_claude_hooks(
        {"type": "list_type", "loc": ("hooks",), "msg": "", "input": _only(hooks, missing)},
        ("hooks",),
        "",
        masked=True,
    )
    listed = shape[1].replace("command: '...'", 'command: "..."') if shape and shape[1] else ""
    them = "the rest" if len(missing) < len(commands) else "them"
    hint = f"paste {them} into an agent's hooks: as a list{', ' + listed if listed else ''}"
    if 'command: "..."' in listed:
        hint += (
            "; a \"...\" command: copy its JSON string with the double quotes (in '...' YAML "
            'keeps \\n and \\" as typed, and a command starting with # becomes one comment)'
        )
    return [_at(doc, rel, "hooks", message, hint)]


def _declared_hooks(root: Path, project: Project, agents: Mapping[str, Any]) -> dict[str, str]:
    """Each command an agent's `hooks:` runs -> the agent's file (the first one)."""
    found: dict[str, str] = {}
    for name, agent in agents.items():
        for hook in getattr(agent, "hooks", None) or []:
            command = getattr(hook, "command", None)
            if isinstance(command, str):
                found.setdefault(command.strip(), _agent_file(root, project, name))
    return found


def _agent_file(root: Path, project: Project, name: str) -> str:
    folder = posixpath.normpath(project.paths.agents)
    for ext in ("yaml", "yml", "json"):
        if (root / folder / f"{name}.{ext}").is_file():
            return posixpath.join(folder, f"{name}.{ext}")
    return f"agent '{name}'"


def _count(groups: Any) -> int:
    """The hooks of one event of a settings.json `hooks:` block."""
    inner = (
        [g.get("hooks") for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []
    )
    return sum(len(h) for h in inner if isinstance(h, list))


def _only(hooks: dict[str, Any], commands: list[str]) -> dict[str, Any]:
    """`hooks` with only the command hooks of `commands` (and every event fim does not run)."""
    keep = set(commands)
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        left = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                continue
            mine = [h for h in inner if not isinstance(h, dict) or h.get("command") in keep]
            if mine:
                left.append({**group, "hooks": mine})
        kept[event] = left
    return kept


def _subagent_files(
    root: Path, folder: str, agents: Mapping[str, Any], project: Project
) -> list[Problem]:
    """Markdown files with front matter (Claude Code subagents: name, description, tools,
    model, the body as the prompt) in the agents folder or `.claude/agents/`: one warning,
    at the first, naming how many, its hint the first one as a fim agent file
    (`fim.config.claude_subagent`)."""
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
    hint = _subagent_hint(root, files[0], project) or (
        "fim agents are agents/<name>.yaml: the front matter's name, description, tools "
        "and model as keys, the Markdown body as `instructions:`"
    )
    message = f"not an agent file: a Claude Code subagent is not loaded by fim{more}"
    return [Problem(files[0], 1, 1, message, hint)]


def _subagent_hint(root: Path, rel: str, project: Project) -> str | None:
    """The subagent `rel` converted: the agent file to write (`claude_subagent.converted`)."""
    # deferred: only a project with Claude Code subagents needs the converter
    from fim.config.claude_subagent import converted, front_matter

    text = read_regular(root / rel, 2**20, follow_links=False)[0].decode("utf-8-sig")
    found = front_matter(text)
    name = str(found[0].get("name") or "") if found is not None else ""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        name = Path(rel).stem
    target = posixpath.join(posixpath.normpath(project.paths.agents), f"{name}.yaml")
    return converted(text, target, list(project.models))


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
