"""The project as a sandboxed program sees it with `sandbox: {project: read}`: read-only at
`/project`, with fim's own state hidden.

Its own module because what must stay hidden is fim's layout (the `.fim/` folder, the
sandbox folders, a SQLite store), which the bwrap policy (fim/tools/sandbox/command.py)
should not have to know. Why each rule holds:

- read-only, always: a program that could write the project could write `hooks/*.py` or
  `agents/*.yaml`, which fim reloads and runs outside any sandbox;
- at `/project`, not at its host path: a symlink in the project to an absolute host path of
  the project (`/srv/app/.fim/state.db`) then resolves in the sandbox's own tree, where that
  path does not exist; symlinks to `/etc/shadow` or `/root` likewise reach the sandbox's
  (absent) files, never the host's;
- hidden (an empty read-only tmpfs over a folder): `.fim/` (the state store with every
  tenant's runs, transcripts, caches, the sandbox folders), the project's sandbox folder
  and its `<sandbox>-keys` (other API keys' files) wherever they are in the project. Each
  is hidden at its real path, so a folder reached by a symlink inside the project is hidden
  too; a mount covers what is created in it later;
- refused (`store_shown`: `fim validate` reports it, the tools return it) when a SQLite
  state store lies in the project outside those folders. Hiding its files one by one did
  not hold (attack-34 #4): a `-wal` made during the call showed, and one hidden at the
  start and then deleted and made again by SQLite (a new inode; the mount on the old one
  is gone) was readable, with other tenants' rows in it. Its place is read as the store
  reads it (`fim.store.schema.normalize_url`, `sqlite_file`), symlinks resolved; a SQLite
  URL the store opens elsewhere (`sqlite+pysqlite:///x.db`, relative to the working
  directory) or as a `file:` URI is refused too: fim cannot tell where it is.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fim import private
from fim.store.schema import normalize_url, sqlite_file

MOUNT = "/project"
"""Where the project appears in the sandbox (and the working directory there)."""
FIM_FOLDER = ".fim"


@dataclass(frozen=True)
class ProjectView:
    """A project folder to bind read-only at `MOUNT`, less `hidden` (relative paths)."""

    root: Path
    """The project folder on the host, resolved."""
    hidden: tuple[tuple[str, bool], ...] = ()
    """(path relative to `root`, whether it is a folder) of what the sandbox sees empty;
    `("", True)` hides the whole project (its root is fim's state)."""
    refused: str = ""
    """Why no sandboxed program may see this project (`store_shown`, as one line): the
    tools return it instead of running. The whole project is hidden then, too."""


def view(root: Path, *, sandbox: str | Path, state_url: str = "") -> ProjectView:
    """The read-only view of the project `root` whose fim.yaml says `sandbox:` (the
    project's sandbox folder, relative to `root`; keys' folders are `<sandbox>-keys`) and
    `state: state_url`. Blocking (it reads the file system): call it in a thread.

    `.fim/`, the sandbox folder and `<sandbox>-keys`, when they belong in the project, are
    made (private, as fim makes them anyway) if missing: a folder is hidden by a mount on
    it, and the project's bind is live, so one created during the call (the call's own
    scratch on a fresh project, another key's first call) would otherwise show, readable
    in the user-namespace mode, where the sandbox's uid is fim's user's."""
    real_root = Path(os.path.realpath(root))
    candidates = _hidden_folders(root, sandbox)
    for made in candidates:  # made now, private, so that they are hidden: see below
        real = Path(os.path.realpath(made))
        if real.is_relative_to(real_root) and not os.path.lexists(real):
            private.folder(real)
    shown = store_shown(root, sandbox=sandbox, state_url=state_url)
    if shown is not None:
        return ProjectView(real_root, (("", True),), refused=f"{shown[0]} ({shown[1]})")
    found: dict[str, bool] = {}
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if real == real_root or real_root.is_relative_to(real):
            return ProjectView(real_root, (("", True),))
        if not real.is_relative_to(real_root) or not os.path.lexists(real):
            continue  # outside the project: not bound, nothing to hide
        found[real.relative_to(real_root).as_posix()] = real.is_dir()
    kept: list[tuple[str, bool]] = []
    for relative in sorted(found, key=lambda r: (r.count("/"), r)):
        if not any(relative.startswith(f"{outer}/") for outer, _ in kept):
            kept.append((relative, found[relative]))
    return ProjectView(real_root, tuple(kept))


async def of_run(root: Path, *, sandbox: str | Path, state_url: str) -> ProjectView:
    """`view`, off the event loop (the tools call it for each call: the project may change)."""
    return await asyncio.to_thread(view, root, sandbox=sandbox, state_url=state_url)


async def for_call(snapshot: Any, setting: str) -> ProjectView | None:
    """What one `shell`/`python_exec` call of an agent sees of `snapshot`'s project: None
    unless the agent's `sandbox.project` (`setting`) is `read`."""
    if setting != "read":
        return None
    project = snapshot.project
    return await of_run(Path(snapshot.root), sandbox=project.sandbox, state_url=project.state)


def store_shown(root: Path, *, sandbox: str | Path, state_url: str) -> tuple[str, str] | None:
    """(message, hint) when `sandbox: {project: read}` would show the SQLite state store of
    `state: state_url` (the project at `root`, its sandbox folder `sandbox`): it lies in
    the project, not in a folder `view` hides; or it is a SQLite store whose file fim
    cannot place. None for PostgreSQL, in-memory SQLite, or a store outside the project or
    in `.fim/`, the sandbox folder or its keys' folders. Reads the file system (symlinks),
    never writes it: `fim validate` asks it too."""
    url = normalize_url(state_url, root)  # as the store reads it (fim.store.engine)
    if not url.startswith("sqlite"):
        return None
    file = sqlite_file(url)
    if file is None:
        if url.partition("?")[0] in _IN_MEMORY:
            return None
        return (
            "sandbox.project: read cannot tell where the SQLite state store is (the state: "
            "URL is not of the form sqlite:///path), so it cannot keep the store, with every "
            "run's transcripts, from sandboxed programs",
            "write state: as sqlite:///path, the path in .fim/ or outside the project",
        )
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(file))
    if not real.is_relative_to(real_root):
        return None
    for folder in _hidden_folders(root, sandbox):
        if real.is_relative_to(os.path.realpath(folder)):
            return None
    return (
        f"sandbox.project: read would show the SQLite state store "
        f"{real.relative_to(real_root).as_posix()} (every run's transcripts and sessions) to "
        f"sandboxed programs: it is in the project, outside .fim/",
        "keep the store in .fim/ (state: sqlite:///.fim/state.db, the default) or outside "
        "the project",
    )


def _hidden_folders(root: Path, sandbox: str | Path) -> list[Path]:
    """The folders `view` hides when they are in the project: `.fim/`, the sandbox folder
    and `<sandbox>-keys` (unresolved)."""
    folder = Path(sandbox) if Path(sandbox).is_absolute() else root / sandbox
    return [root / FIM_FOLDER, folder, folder.parent / f"{folder.name}-keys"]


_IN_MEMORY = ("sqlite://", "sqlite:///:memory:")
"""SQLite URLs of an in-memory store (`sqlite_file` is None for them): no file to show."""
