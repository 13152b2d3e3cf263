"""fim's own folder of a project, `.fim/`, is its user's alone (mode 0700).

It holds the SQLite state store (every run's prompts, tool results and answers, sessions,
approvals), hook transcripts, cached MCP tool lists, locks and the sandboxes' folders.
Made with the process's umask it was 0755 and the store 0644: every other user of the
machine could read every conversation. Whatever fim writes in it goes through `parents`,
which makes the folder private first (and narrows one an older fim made), so nothing in it
is reachable by another user whatever its own mode. The sandboxes still work in root mode:
bwrap binds their folder at the same path in a namespace of its own, where the folders
above it are bwrap's.

A sandbox folder (fim.yaml `sandbox:`) may lie outside `.fim/`: `folder` makes it its user's
alone wherever it is (attack-25 #2). A sandboxed program owns its `scratch/` (in a user
namespace its uid is fim's user on the host) and can leave a setuid copy of a shell there;
behind a private folder no other user reaches it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

FOLDER = ".fim"

_TRANSCRIPTS: dict[str, Path] = {}
"""Project folder -> where its hook transcripts go in this process, decided once."""


def transcripts(root: Path | str) -> Path:
    """Where the runs' hook transcripts (Claude Code's `transcript_path`) are kept, one
    `<run id>.jsonl` each; `fim prune` deletes them with their runs.

    `<project>/.fim/transcripts` when fim can write there; else (a read-only project: a
    `:ro` volume, a ConfigMap, a host folder another uid owns) a folder of this process's
    own in the temp folder (`$TMPDIR`, 0700, removed at exit), said once at WARNING
    (`fim.hooks`). Before, every call a command hook guarded was blocked on a read-only
    project, the run said `ok` and the log nothing (newcomer-52 #2). Decided on the first
    call for a project folder (`fim serve` and `fim run` ask at start), then kept."""
    key = os.path.realpath(root)  # one choice per folder, however a link names it
    found = _TRANSCRIPTS.get(key)
    if found is None:
        found = _TRANSCRIPTS[key] = transcripts_folder(Path(root))
    return found


def transcripts_folder(root: Path) -> Path:
    """`transcripts`' choice for `root`, made now: the project's own folder, made private
    (`folder`); an OSError making it, or a folder fim may not write in, picks a temp one."""
    own = root / FOLDER / "transcripts"
    try:
        folder(own)
        if os.access(own, os.W_OK):
            return own
        reason = "not writable"
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    chosen = Path(process_folder("fim-transcripts-"))
    logging.getLogger("fim.hooks").warning(
        "hook transcripts go to %s (this process's own, removed at exit): the project "
        "folder's %s cannot be written (%s)", chosen, own, reason,
    )  # fmt: skip
    return chosen


def parents(path: Path) -> None:
    """Make the folders `path` goes in; a `.fim` among them is made, or narrowed to, its
    user's alone first."""
    for folder in (path.parent, *path.parent.parents):
        if folder.name == FOLDER:
            _private(folder)
            break
    path.parent.mkdir(parents=True, exist_ok=True)


def folder(path: Path) -> None:
    """Make `path` (and the folders it goes in: a `.fim` among them private first) with
    `path` itself its user's alone, narrowing an existing one that is ours to 0700."""
    parents(path)
    _private(path)


def sandbox_folder(path: Path) -> None:
    """A sandbox folder (fim.yaml `sandbox:`, wherever it is), made or narrowed to its
    user's alone, and for a key's own (`<sandbox>-keys/<24 hex digits>`,
    fim/tools/builtin/_common.py `key_folder`) `<sandbox>-keys` too: a sandboxed program's
    files there belong to fim's user on the host, a setuid one included (attack-25 #2)."""
    name = path.name
    if path.parent.name.endswith("-keys") and len(name) == 24 and set(name) <= _HEX:
        _private(path.parent)
    folder(path)


_HEX = frozenset("0123456789abcdef")


def _private(folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        found = folder.lstat()  # a link's target is not ours to narrow (a prepared checkout)
        if stat.S_ISDIR(found.st_mode) and found.st_mode & 0o077 and found.st_uid == os.geteuid():
            os.chmod(folder, 0o700)  # made by an older fim, or by hand


def process_folder(prefix: str, parent: str | None = None) -> str:
    """A new folder of this process's own (0700) in the temp folder (or `parent`), removed
    at exit by the process that made it: for files fim hands to its children (hooks'
    bytecode, the isolate helpers' launcher), where nobody else may put one first."""
    # deferred: atexit and tempfile are needed only when a child needs such a folder
    import atexit
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix, dir=parent)
    atexit.register(_remove, os.getpid(), folder)
    return folder


def still_ours(folder: str) -> bool:
    """Whether `folder` is still a folder of this user's alone (a tmp cleaner may have
    removed it, and another user made one at the same path)."""
    try:
        found = os.lstat(folder)
    except OSError:
        return False
    return (
        stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid() and not found.st_mode & 0o077
    )


def _remove(pid: int, folder: str) -> None:
    """At exit, in the process that made it (a forked child inherits the handler)."""
    if os.getpid() == pid:
        # deferred: shutil is needed only at exit
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
