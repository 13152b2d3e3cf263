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
- hidden (an empty read-only tmpfs over a folder, an unreadable node over a file): `.fim/`
  (the state store with every tenant's runs, transcripts, caches, the sandbox folders), the
  project's sandbox folder and its `<sandbox>-keys` (other API keys' files) wherever they
  are in the project, and a SQLite store's files (with `-wal`, `-shm`, `-journal` as they
  exist when the call starts: a store in `.fim/`, the default, is hidden whatever it
  creates). Each is hidden at its real path, so a folder reached by a
  symlink inside the project is hidden too; a mount covers what is created in it later.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from fim import private

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
    folder = Path(sandbox) if Path(sandbox).is_absolute() else root / sandbox
    candidates = [root / FIM_FOLDER, folder, folder.parent / f"{folder.name}-keys"]
    for made in candidates:  # made now, private, so that they are hidden: see below
        real = Path(os.path.realpath(made))
        if real.is_relative_to(real_root) and not os.path.lexists(real):
            private.folder(real)
    store = _sqlite_file(state_url, root)
    if store is not None:
        candidates += [store, *(store.with_name(store.name + end) for end in _SQLITE_FILES)]
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


_SQLITE_FILES = ("-wal", "-shm", "-journal")


def _sqlite_file(url: str, root: Path) -> Path | None:
    """The file of a `sqlite:///path` store (relative paths are the project's), or None."""
    for prefix in ("sqlite+aiosqlite:///", "sqlite:///"):
        if url.startswith(prefix):
            path = Path(url.removeprefix(prefix).split("?", 1)[0])
            return path if path.is_absolute() else root / path
    return None
