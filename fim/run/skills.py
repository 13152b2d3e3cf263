"""Agent Skills for a run: prompt stubs or full bodies, and the `read_skill` tool.

A skill's body can run to thousands of tokens, and a hub agent may carry a dozen skills it
rarely needs. Progressive mode (the default) therefore shows the model one line per skill
and lets it pull a body (or a script/reference file next to SKILL.md) through `read_skill`
only when a request calls for it. Inline mode puts every body into the system prompt, for
small agents or models that handle meta-tools poorly.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from fim.build.snapshot import Skill, Snapshot
from fim.config.claude_tools import allowed_tool_entries, fim_tool_of
from fim.errors import RunError
from fim.run.services import Provision, RunContext
from fim.tools.base import FunctionTool
from fim.tools.skill_dirs import selected_skills
from fim.types import Tool, ToolResult

READ_SKILL = "read_skill"
MAX_FILE_BYTES = 64_000
"""Larger files are cut at this size (with a note): a reference file is read to be followed,
and anything bigger belongs in a tool that processes it, not in the conversation."""
_BINARY_SNIFF = 8192


def cut(text: str, limit: int) -> str:
    """Collapse whitespace and cut to `limit` characters, marking the cut with an ellipsis.
    The cut falls on a word boundary when one is in the second half, so stubs never end in
    half a word."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 1]
    space = head.rfind(" ")
    if space >= limit // 2 and not flat[limit - 1].isspace():
        head = head[:space]
    return head.rstrip(" ,;:-—") + "…"


def _broken(snapshot: Snapshot, selection: str | list[str]) -> list[tuple[str, str]]:
    """(skill, first problem) of each broken skill the selection uses (`all` uses all)."""
    found = getattr(snapshot, "broken_skills", {})
    names = sorted(found) if selection == "all" else [n for n in selection if n in found]
    return [(n, str(found[n][0])) for n in names if found[n]]


def parse_allowed_tools(value: str | list[str] | None) -> list[str]:
    """`allowed-tools` in Claude's syntax, as a string or a list, as entries, each kept
    whole with its parenthesised pattern (`fim.config.claude_tools.allowed_tool_entries`)."""
    if not value:
        return []
    items = [value] if isinstance(value, str) else [str(v) for v in value]
    return [entry for item in items for entry in allowed_tool_entries(item)]


def _allowed_tools(skill: Skill) -> list[str]:
    """Entries as written, each followed by the fim tool it maps to when the names differ."""
    out = []
    for entry in parse_allowed_tools(skill.meta.allowed_tools):
        mapped = fim_tool_of(entry)
        out.append(f"{entry} (fim: {mapped})" if mapped and mapped != entry else entry)
    return out


STUB_BUDGET = 300
"""Characters of a skill's stub line: whole sentences up to this, plus every negative
trigger sentence ("Do NOT use when ...") whatever the budget, since dropping one makes the
model open the skill exactly when it should not."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`*])")
_NEGATIVE = re.compile(
    r"\b(do not|don't|never|not for|not use|not trigger|avoid|except|unless|instead)\b",
    re.IGNORECASE,
)


def stub_text(description: str, budget: int = STUB_BUDGET) -> str:
    """The stub of a description: leading whole sentences within `budget`, and every
    sentence with a negative trigger clause. A first sentence longer than the budget is cut
    at a word (the only case where a sentence is not whole)."""
    flat = " ".join(description.split())
    if len(flat) <= budget:
        return flat
    sentences = _SENTENCE.split(flat)
    negative = [i for i, text in enumerate(sentences) if _NEGATIVE.search(text)]
    room = budget - sum(len(sentences[i]) + 1 for i in negative)
    kept: list[int] = []
    used = 0
    for i, text in enumerate(sentences):
        if i in negative:
            continue
        if used + len(text) + 1 > room:
            break
        kept.append(i)
        used += len(text) + 1
    if not kept and (not negative or negative[0] != 0):
        return " ".join(
            [cut(sentences[0], max(room, budget // 2)), *(sentences[i] for i in negative)]
        )
    chosen = sorted([*kept, *negative])
    text = " ".join(sentences[i] for i in chosen)
    return text if len(chosen) == len(sentences) else text + " …"


# --------------------------------------------------------------------------- prompt text


def stubs_prompt(skills: Mapping[str, Skill]) -> str:
    """Progressive mode: one line per skill, and how to open one."""
    lines = [
        "## Skills",
        f"Written procedures. When a request matches one, call {READ_SKILL}(name) and follow "
        "the full text; the line here is only a summary.",
    ]
    lines += [f"- {name}: {stub_text(skill.meta.description)}" for name, skill in skills.items()]
    return "\n".join(lines)


def _file_list(skill: Skill) -> str:
    return "\n".join(f"- {f}" for f in skill.files)


def inline_prompt(skills: Mapping[str, Skill]) -> str:
    """Inline mode: every skill's full body, so no tool call is needed to follow one."""
    parts = [
        "## Skills\nYou have skills: written procedures for specific kinds of tasks. When a "
        "request matches a skill, follow its instructions."
    ]
    for name, skill in skills.items():
        section = f"### Skill: {name}\n{skill.meta.description.strip()}\n\n{skill.body.strip()}"
        if skill.files:
            section += (
                f"\n\nFiles of this skill (read one with {READ_SKILL}(name={name!r}, "
                f"file=...)):\n{_file_list(skill)}"
            )
        parts.append(section)
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- read_skill


def _render_body(skill: Skill) -> str:
    text = f"# Skill: {skill.name}\n\n{skill.body.strip()}\n"
    text += (
        f"\nSkill directory: {skill.directory.resolve()} (read-only in python_exec and shell: "
        "run its scripts by this path, write outputs to the working directory)\n"
    )
    tools = _allowed_tools(skill)
    if tools:
        text += f"\nTools this skill expects: {', '.join(tools)}\n"
    if skill.files:
        text += (
            f"\nFiles of this skill (read one with {READ_SKILL}(name={skill.name!r}, "
            f'file="<path>")):\n{_file_list(skill)}\n'
        )
    else:
        text += "\nThis skill has no other files.\n"
    return text


def _read_bytes(path: Path, limit: int) -> tuple[bytes, int]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        return fh.read(limit), size


def _decode_text(data: bytes, *, truncated: bool) -> str | None:
    """UTF-8 text of a file's head, or None when it is binary.

    A file cut at the size cap may end mid-character; that alone does not make it binary.
    """
    if b"\x00" in data[:_BINARY_SNIFF]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8", errors="replace")
        return None


async def _read_file(skill: Skill, file: str) -> ToolResult:
    """One file of a skill, confined to the skill's folder and to the files it lists."""
    listed = ", ".join(skill.files) or "none"
    requested = PurePosixPath(file.replace("\\", "/"))
    if requested.is_absolute() or ".." in requested.parts:
        return ToolResult(
            content=f"Error: '{file}' is outside the skill '{skill.name}'. File paths are "
            f"relative to the skill folder; valid files: {listed}.",
            is_error=True,
        )
    relative = str(PurePosixPath(*[p for p in requested.parts if p not in ("", ".")]))
    if relative == "SKILL.md":
        return ToolResult(content=_render_body(skill))
    if relative not in skill.files:
        return ToolResult(
            content=f"Error: the skill '{skill.name}' has no file '{file}'. Valid files: "
            f"{listed}. Call {READ_SKILL}(name={skill.name!r}) to see its instructions.",
            is_error=True,
        )
    root = skill.directory.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return ToolResult(
            content=f"Error: '{file}' of the skill '{skill.name}' cannot be read (it links "
            "outside the skill folder or no longer exists).",
            is_error=True,
        )
    data, size = await asyncio.to_thread(_read_bytes, path, MAX_FILE_BYTES)
    text = _decode_text(data, truncated=size > MAX_FILE_BYTES)
    if text is None:
        return ToolResult(
            content=f"'{relative}' of the skill '{skill.name}' is a binary file ({size} "
            "bytes) and cannot be shown as text. Use it by path with a tool that processes "
            "such files, or read one of the text files instead.",
            is_error=True,
        )
    header = f"# {skill.name}/{relative}\n\n"
    if size > MAX_FILE_BYTES:
        note = (
            f"\n\n[truncated: the file has {size} bytes; only the first {MAX_FILE_BYTES} are shown]"
        )
        return ToolResult(content=header + text + note)
    return ToolResult(content=header + text)


def _part(result: ToolResult, name: str, file: str | None, part: int) -> ToolResult:
    """One part of a body or file that is longer than the observation budget
    (fim/run/budget.py), cut at paragraph breaks, with the call that reads the next."""
    # deferred: loading fim.run.budget costs a few ms
    from fim.run.budget import budget_bytes, parts

    limit = budget_bytes()
    chunks = parts(result.content, limit - 400)
    if len(chunks) == 1:
        return result
    if part > len(chunks) or part < 1:
        return ToolResult(
            content=f"Error: part {part} does not exist; this text has {len(chunks)} parts.",
            is_error=True,
        )
    args = f"name={name!r}" + (f", file={file!r}" if file else "")
    note = f"[part {part} of {len(chunks)}"
    if part < len(chunks):
        note += f"; read the rest before acting: {READ_SKILL}({args}, part={part + 1})"
    return ToolResult(content=f"{chunks[part - 1]}\n{note}]", metadata=result.metadata)


def read_skill_tool(skills: Mapping[str, Skill], *, files_only: bool = False) -> Tool:
    """The `read_skill(name, file=None)` tool over the agent's skills.

    `files_only` is the inline-mode variant: bodies are already in the prompt, so the tool
    exists only to open the scripts and references next to them.
    """
    names = ", ".join(skills) or "none"

    async def read_skill(name: str, file: str | None = None, part: int = 1) -> ToolResult:
        skill = skills.get(name)
        if skill is None:
            return ToolResult(
                content=f"Error: there is no skill named '{name}'. Valid skills: {names}. "
                f"Call {READ_SKILL} with one of these exact names.",
                is_error=True,
            )
        result = await _read_file(skill, file) if file else ToolResult(content=_render_body(skill))
        return result if result.is_error else _part(result, name, file, part)

    if files_only:
        description = (
            "Read a file that belongs to a skill (a script, reference or template listed "
            "under the skill in your instructions)."
        )
    else:
        description = (
            "Load a skill's full instructions and its file list, or with `file` one of "
            "those files. Call it before following a skill."
        )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Skill name, exactly as listed."},
            "file": {"type": "string", "description": "A file path from the skill's list."},
            "part": {
                "type": "integer",
                "minimum": 1,
                "description": "Which part of a long text (the reply says how many).",
            },
        },
        "required": ["name", "file"] if files_only else ["name"],
        "additionalProperties": False,
    }

    def tools_of(name: str) -> list[str]:
        """fim tool names the skill's `allowed-tools` maps to (for loading them)."""
        skill = skills.get(name)
        if skill is None:
            return []
        mapped = (fim_tool_of(e) for e in parse_allowed_tools(skill.meta.allowed_tools))
        return list(dict.fromkeys(m for m in mapped if m))

    return FunctionTool(
        READ_SKILL,
        description,
        parameters,
        read_skill,
        category="skills",
        metadata={"skill_tools": tools_of},
    )


# --------------------------------------------------------------------------- provider


def provide(ctx: RunContext) -> Provision | None:
    """Skills of `ctx.agent` in the run's mode (agent > FIM_SKILL_TOOL_MODE > fim.yaml)."""
    broken = _broken(ctx.snapshot, ctx.agent.skills)
    if broken:
        first = broken[0]
        raise RunError(
            f"agent '{ctx.agent.name}' uses the skill '{first[0]}', which failed to load: "
            f"{first[1]}",
            hint="fix the skill (`fim validate` lists every problem) or remove it from the "
            "agent's skills",
        )
    skills = selected_skills(ctx.snapshot, ctx.agent.skills)
    if not skills:
        return None
    if ctx.mode("skills") in ("inline", "legacy"):
        with_files = any(skill.files for skill in skills.values())
        tools = [read_skill_tool(skills, files_only=True)] if with_files else []
        return Provision(tools=tools, prompt=inline_prompt(skills), pinned=[t.name for t in tools])
    return Provision(
        tools=[read_skill_tool(skills)], prompt=stubs_prompt(skills), pinned=[READ_SKILL]
    )


__all__ = [
    "READ_SKILL",
    "cut",
    "inline_prompt",
    "provide",
    "read_skill_tool",
    "selected_skills",
    "stubs_prompt",
]
