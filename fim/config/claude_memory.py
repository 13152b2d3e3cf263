"""A Claude Code project's memory files (`CLAUDE.md`, `AGENTS.md` at the root), which fim
reads only where an agent's instructions include them: `fim validate` warns about one no
agent includes (it was silently ignored), and about Claude Code's `@path` import lines in
one that is included (fim's include does not follow them: the model reads `@docs/x.md`).
An undefined name in an included file (a Handlebars `{{customer.name}}` in a code sample)
gets the way to include it as plain text (`RAW_HINT`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fim.config.files import read_regular
from fim.errors import Problem

MEMORY_FILES = ("CLAUDE.md", "AGENTS.md")
"""The instruction files Claude Code (and other agents' tools) read from a project root."""

RAW_HINT = (
    "to include a file as plain text, wrap its content in {% raw %} ... {% endraw %}: "
    "its {{ }} then reach the model as written"
)
"""How to include a file whose text holds `{{ }}` of another template language."""

_QUOTED = re.compile(r"""['"]([^'"\n{}%]{1,300})['"]""")
_IMPORT = re.compile(r"(?<![\w.`@])@((?:~/|\.{0,2}/)?[\w.-]+(?:/[\w.-]+)*)")
_MAX_FILES = 50
"""Prompt files followed from the agents' instructions when looking for an include."""


def as_text_hint(message: str, hint: str | None) -> str | None:
    """`RAW_HINT` for a rendering error of an included file that another template language
    causes (a name that is not a misspelt `project` / `agent` / `env` / `now`, a syntax
    error), else None: `'project' has no attribute 'nme'` is a typo of fim's own."""
    if "is undefined" in message and not (hint or "").startswith("did you mean"):
        return RAW_HINT
    return RAW_HINT if message.startswith("invalid Jinja2 template") else None


def memory_files(root: Path, agents: Mapping[str, Any]) -> list[Problem]:
    """Warnings for the root's CLAUDE.md / AGENTS.md: not included by any agent, or
    included with `@path` import lines."""
    included = _included(root, [str(getattr(a, "instructions", "") or "") for a in agents.values()])
    found: list[Problem] = []
    for name in MEMORY_FILES:
        text = _text(root, name)
        if text is None:
            continue
        if name not in included:
            found.append(
                Problem(
                    name,
                    1,
                    1,
                    f"{name} is not read by fim",
                    f"add {{% include '{name}' %}} to an agent's instructions",
                )
            )
            continue
        imports = _imports(root, text)
        if imports:
            line, column, target = imports[0]
            more = f" (and {len(imports) - 1} more)" if len(imports) > 1 else ""
            found.append(
                Problem(
                    name,
                    line,
                    column,
                    f"Claude Code's import @{target} is not followed by fim: the model reads "
                    f"the line as written{more}",
                    f"include the file in the agent's instructions too: {{% include '{target}' %}}",
                )
            )
    return found


def _text(root: Path, rel: str) -> str | None:
    """A regular file of the project (not a link out of it), as text, or None."""
    real, top = os.path.realpath(root / rel), os.path.realpath(root)
    if not real.startswith(top + os.sep):
        return None
    try:
        return read_regular(root / rel, 2**20, follow_links=False)[0].decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None


def _included(root: Path, texts: list[str]) -> set[str]:
    """The file names the instructions quote, and the files those quote in turn (an
    include of `prompts/system.md` that includes CLAUDE.md includes it too)."""
    seen: set[str] = set()
    queue = list(texts)
    while queue and len(seen) < _MAX_FILES:
        for name in _QUOTED.findall(queue.pop()):
            name = name.strip()
            if name in seen:
                continue
            seen.add(name)
            text = _text(root, name) if not name.startswith(("/", ".")) else None
            if text is not None:
                queue.append(text)
    return seen


def _imports(root: Path, text: str) -> list[tuple[int, int, str]]:
    """(line, column, path) of Claude Code's `@path` imports in `text`, outside code: a
    token that names a file of the project or looks like a path (`@docs/x.md`), not a
    mention (`@alice`) or an address (`a@b.c`)."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced:
            continue
        plain = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)
        for match in _IMPORT.finditer(plain):
            target = match.group(1).rstrip(".")
            if "/" in target or re.search(r"\.[A-Za-z]\w*$", target) or (root / target).exists():
                found.append((number, match.start() + 1, target))
    return found


__all__ = ["MEMORY_FILES", "RAW_HINT", "as_text_hint", "memory_files"]
