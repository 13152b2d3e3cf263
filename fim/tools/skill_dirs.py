"""Which skills an agent selected, and their folders: read by the sandboxed tools (shell,
python_exec bind them read-only) and by the run-time assembly (`fim.run.skills`), so it sits
at the tools' layer, below both."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.skill_files import Skill
    from fim.run.services import RunContext


def selected_skills(snapshot: Snapshot, selection: str | list[str]) -> dict[str, Skill]:
    """The skills an agent's `skills:` field selects, in a stable order.

    `all` means every skill of the project, sorted by name; a list keeps the author's order.
    Names the compiler already rejected cannot appear here, so unknown ones are skipped.
    """
    if selection == "all":
        return {name: snapshot.skills[name] for name in sorted(snapshot.skills)}
    return {name: snapshot.skills[name] for name in selection if name in snapshot.skills}


def skill_dirs(ctx: RunContext) -> list[Path]:
    """Folders of the agent's skills, resolved and inside the project (a skill symlinked
    elsewhere is not exposed), for the sandbox's read-only binds."""
    root = ctx.snapshot.root.resolve()
    dirs = []
    for skill in selected_skills(ctx.snapshot, ctx.agent.skills).values():
        path = skill.directory.resolve()
        if path.is_relative_to(root) and path.is_dir():
            dirs.append(path)
    return dirs
