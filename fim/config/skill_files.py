"""Agent Skills on disk: skills/<name>/SKILL.md (YAML front matter + Markdown body) and
the files next to it. Public skills in this format load unchanged: the folder is the
skill's id whatever its display `name`, `${...}` is text (not interpolated), and a broken
folder's problems are kept aside so only the agents that use it fail."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fim.config.files import not_utf8_name, os_problem, read_text
from fim.config.schema import SkillMeta
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.loader import Declarations


@dataclass(frozen=True)
class Skill:
    """A skill: front matter, Markdown body, and the files that sit next to SKILL.md.

    Defined with the loader that reads it; the snapshot holds these."""

    name: str
    meta: SkillMeta
    body: str
    directory: Path
    files: tuple[str, ...] = ()
    """Paths relative to `directory` (scripts/, references/ ...), SKILL.md excluded."""


def load_skills(decls: Declarations, name: str) -> None:
    """Every <name>/<skill>/SKILL.md (`paths.skills`, each folder it names): front matter
    validated, body and sibling files kept."""
    folder = decls.root / name
    try:
        dirs = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:
        return
    except OSError as exc:
        decls.problems.append(os_problem(decls, folder, exc))
        return
    for entry in dirs:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        if (bad_name := not_utf8_name(decls, path)) is not None:
            decls.problems.append(bad_name)
            continue
        try:
            os.stat(path)
        except OSError as exc:
            decls.problems.append(os_problem(decls, path, exc))
            decls.broken["skill"].add(entry.name)
            continue
        if entry.is_dir():
            before = len(decls.problems)
            _load_skill(decls, path)
            if len(decls.problems) > before:  # kept aside: only its users fail
                decls.skill_problems[entry.name] = decls.problems[before:]
                del decls.problems[before:]


def _load_skill(decls: Declarations, directory: Path) -> None:
    skill_md = directory / "SKILL.md"
    rel = decls.rel(skill_md)
    decls.broken["skill"].add(directory.name)
    outside = _links_out(decls.root, directory, skill_md)
    if outside is not None:
        decls.problems.append(
            Problem(
                rel,
                1,
                1,
                outside,
                "copy the skill into the project instead of linking it: a skill's files are "
                "read and shown to the model, and nothing outside the project is",
            )
        )
        return
    if not skill_md.exists() and not skill_md.is_symlink():
        decls.problems.append(
            Problem(
                rel,
                1,
                1,
                "skill folder has no SKILL.md",
                "add SKILL.md with name/description front matter",
            )
        )
        return
    text = read_text(decls, skill_md)
    if text is None:
        return
    lines = text.split("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if lines[0].rstrip() != "---" or end is None:
        decls.problems.append(
            Problem(
                rel,
                1,
                1,
                "SKILL.md must start with YAML front matter between '---' lines",
                "begin the file with ---, name: ..., description: ..., ---",
            )
        )
        return
    doc = decls.parse("\n".join(lines[1:end]), rel, line_offset=1, expand=False)
    if doc is None:
        return
    if isinstance(doc.data, dict):
        doc.data.setdefault("name", directory.name)
    meta = decls.validate(doc, "skill", SkillMeta)
    if meta is None:
        return
    body = "\n".join(lines[end + 1 :]).lstrip("\n")
    files = tuple(_skill_files(directory))
    decls.broken["skill"].discard(directory.name)
    # The folder is the id (Claude Code plugins use `name: Hook Development` in
    # `hook-development/`); `meta.name` stays the display name.
    skill = Skill(directory.name, meta, body, directory, files)
    decls.register("skill", directory.name, skill, doc)


def _links_out(root: Path, directory: Path, skill_md: Path) -> str | None:
    """Why a skill folder, or its SKILL.md, is a link out of the project (None: it is not).
    A skill is often a third party's folder copied in, links and all: a SKILL.md linked to
    a file of the machine would have its text read and given to the model."""
    # os.path.realpath, not Path.resolve: a SKILL.md linked to itself made resolve raise
    # RuntimeError (Python 3.11), a traceback; realpath leaves the loop for the read to report
    project = Path(os.path.realpath(root))
    folder = Path(os.path.realpath(directory))
    if not folder.is_relative_to(project):
        return f"skill folder '{directory.name}' links outside the project"
    if skill_md.is_symlink() and not Path(os.path.realpath(skill_md)).is_relative_to(folder):
        return "SKILL.md links outside its skill folder"
    return None


def _skill_files(directory: Path) -> list[str]:
    """Files next to SKILL.md (scripts/, references/ ...); symlinked dirs are not followed."""
    found: list[str] = []
    for base, dirnames, filenames in os.walk(directory, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            rel = Path(base, name).relative_to(directory).as_posix()
            if rel != "SKILL.md" and not name.startswith("."):
                found.append(rel)
    return found
