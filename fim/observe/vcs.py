"""The commit a project's checkout is at, for the `vcs.ref.head.revision` of its traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_git_heads: dict[tuple[Path, str], str] = {}


def git_commit(root: Path | None, version: str = "") -> str:
    """The commit the project's checkout is at, read from .git without running git
    (empty when the project is not a git checkout), once per snapshot `version`: a
    `git pull` that changes the project makes a new snapshot, whose runs name the new
    commit (keyed by the root alone, a server named its first commit until it stopped)."""
    if root is None:
        return ""
    key = (root, version)
    known = _git_heads.get(key)  # the snapshot's own Path: no new Path, no rehash
    if known is not None:
        return known
    root = Path(root)
    commit = ""
    for folder in (root, *root.parents):
        git = folder / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>"
            text = git.read_text(errors="replace").strip()
            if text.startswith("gitdir:"):
                git = (folder / text.split(":", 1)[1].strip()).resolve()
        if git.is_dir():
            commit = _read_head(git)
            break
    if len(_git_heads) >= 256:  # one entry a reload: stay bounded
        _git_heads.clear()
    _git_heads[key] = commit
    return commit


def served_commit(snapshot: Any) -> str:
    """The commit a served `snapshot` was built from: the HEAD of the git checkout its
    project is in (under `fim serve --git`, the commit its version names), '' outside one
    (newcomer-52 #8: the start line, reload lines, `/metrics` and run records say it)."""
    return git_commit(getattr(snapshot, "root", None), getattr(snapshot, "version", ""))


def _read_head(git: Path) -> str:
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        return ""
    return ""
