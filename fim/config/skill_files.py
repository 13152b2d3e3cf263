"""Agent Skills on disk: skills/<name>/SKILL.md (YAML front matter + Markdown body) and
the files next to it. Public skills in this format load unchanged."""

from __future__ import annotations

import os
from pathlib import Path

from fim.build.snapshot import Skill
from fim.config.files import os_problem, read_text
from fim.config.loader import Declarations, Entry, _parse, _register, _validate
from fim.config.schema import SkillMeta
from fim.errors import Problem


def load_skills(decls: Declarations) -> None:
    """Every skills/<name>/SKILL.md: front matter validated, body and sibling files kept."""
    folder = decls.root / decls.folder("skill")
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
        try:
            os.stat(path)
        except OSError as exc:
            decls.problems.append(os_problem(decls, path, exc))
            decls.broken["skill"].add(entry.name)
            continue
        if entry.is_dir():
            _load_skill(decls, path)


def _load_skill(decls: Declarations, directory: Path) -> None:
    skill_md = directory / "SKILL.md"
    rel = decls.rel(skill_md)
    decls.broken["skill"].add(directory.name)
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
    doc = _parse(decls, "\n".join(lines[1:end]), rel, line_offset=1)
    if doc is None:
        return
    if isinstance(doc.data, dict):
        doc.data.setdefault("name", directory.name)
    meta = _validate(decls, doc, "skill", SkillMeta)
    if meta is None:
        return
    if meta.name != directory.name:
        decls.problems.append(
            doc.problem(
                ("name",),
                f"skill name '{meta.name}' differs from its folder '{directory.name}'",
                "rename the folder or the name (they must match)",
            )
        )
        return
    body = "\n".join(lines[end + 1 :]).lstrip("\n")
    files = tuple(_skill_files(directory))
    decls.broken["skill"].discard(directory.name)
    _register(decls, Entry("skill", meta.name, Skill(meta.name, meta, body, directory, files), doc))


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
