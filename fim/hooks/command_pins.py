"""A command hook's scripts, held to the snapshot: `hooks/x.sh` runs only as compiled.

When the project has a command hook, the compile records the sha256 of every file under the
hook folders (the hooks folder and `.claude/hooks/`, `fim.build.hook_checks.pin_folders`) with each
folder's entries, and of every project path a command's words name
(`fim.build.hook_checks.pin_commands`), all part of the version. Pinning whole folders
rather than the words is what makes it hold however the shell is asked to reach a script
there (`cd hooks && ./x`, `"$CLAUDE_PROJECT_DIR"/.claude/hooks/x.sh`, `hooks/x;`,
`sh -c "exec hooks/x"`). Before the command runs, each file and folder is checked against it;
a script edited, replaced, removed or added since blocks the call (hooks fail closed) with a
message saying so, until a reload that checks the edit swaps in a snapshot that pins the new
bytes. A script outside those folders reached only through shell syntax (`cd scripts && ./x`)
is not seen, nor what a script reads or sources from outside them. The script is run in
place (its interpreter line, its own folder and what it sources all work as written), so
this is a check at start: an edit in the instant between the check and the shell's start is
not seen. A hook that writes into the hook folders (a state file, a log not named `*.log`)
changes them: its next call is blocked until a reload; keep such files elsewhere (`.fim/`).

A file is hashed again, and a folder listed again, only when its stat (inode, size, mtime,
ctime) changed since the last check; ctime moves on every write and cannot be set back, and
a file changed in the same tick it was hashed is hashed again next time (as
`fim.config.files` treats racy reads)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path

from fim.build.hook_checks import ABSENT, MAX_PINNED_FILES, MAX_SCRIPT_BYTES, folder_entries
from fim.config.files import read_regular

_RACY_NS = 2_000_000_000
"""A file changed this close to its hashing is hashed again on the next check."""

_MAX_CACHED = 8 * MAX_PINNED_FILES
"""Files (and folders) whose stat and digest are kept: several snapshots' full sets."""

_HASHED: dict[str, tuple[tuple[int, int, int, int, int], str]] = {}
"""Path -> (stat key, sha256) of files whose hash is known to match that stat."""


def _sha256(path: str) -> str | None:
    """The file's sha256 now, from the cache while its stat is unchanged; None if it is
    gone or unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    cached = _HASHED.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    hashed_at = time.time_ns()
    try:
        raw, st = read_regular(path, MAX_SCRIPT_BYTES)
    except OSError:
        return None
    sha = hashlib.sha256(raw).hexdigest()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if max(st.st_mtime_ns, st.st_ctime_ns) < hashed_at - _RACY_NS:
        if len(_HASHED) >= _MAX_CACHED:
            _HASHED.clear()
        _HASHED[path] = (key, sha)
    return sha


_LISTED: dict[str, tuple[tuple[int, int, int, int], tuple[str, ...]]] = {}
"""Folder -> (stat key, entries) of folders whose listing is known to match that stat."""


def _entries(path: str) -> tuple[str, ...] | None:
    """The folder's entries now (`folder_entries`), from the cache while its stat is
    unchanged (adding, removing or renaming an entry moves the folder's mtime and ctime);
    None if it is gone or cannot be listed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    cached = _LISTED.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    listed_at = time.time_ns()
    try:
        entries = folder_entries(path)
    except OSError:
        return None
    if max(st.st_mtime_ns, st.st_ctime_ns) < listed_at - _RACY_NS:
        if len(_LISTED) >= _MAX_CACHED:
            _LISTED.clear()
        _LISTED[path] = (key, entries)
    return entries


def _refusal(what: str, version: str) -> str:
    return (
        f"{what} since snapshot {version} was compiled, so it was not run and the call is "
        "blocked (hooks fail closed); the next reload checks the change and runs it "
        "(`fim validate` shows what it says)"
    )


def _listing_change(rel: str, pinned: tuple[str, ...] | None, now: tuple[str, ...] | None) -> str:
    """What differs between a folder's pinned entries and its entries now, in words."""
    if pinned is None:
        return f"hook folder {rel} was added"
    if now is None:
        return f"hook folder {rel} was removed or cannot be read"
    added = sorted(set(now) - set(pinned))
    name = added[0] if added else sorted(set(pinned) - set(now))[0]
    path = name.rstrip("/") if rel == "." else f"{rel}/{name.rstrip('/')}"
    return f"hook file {path} was {'added' if added else 'removed'}"


def changed_script(
    root: str | Path,
    pins: tuple[tuple[str, str], ...],
    version: str,
    folders: Mapping[str, tuple[str, ...] | None] | None = None,
    folder_files: Mapping[str, str] | None = None,
) -> str | None:
    """Why the command may not run (a path its words name, a file of the hook folders, or
    those folders' entries are not what snapshot `version` compiled), or None when all are
    as compiled. Per call: a stat of each pinned file and folder; a file is hashed and a
    folder listed again only when its stat changed."""
    for rel, sha in (*pins, *(folder_files or {}).items()):
        path = os.path.join(root, rel)
        try:  # the common case inline: a stat and a dict lookup per file
            st = os.stat(path)
            cached = _HASHED.get(path)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if cached is not None and cached[0] == key and cached[1] == sha:
                continue
        except OSError:
            pass
        now = _sha256(path) or ABSENT
        if now == sha:
            continue
        if sha == ABSENT:
            what = "was added"
        else:
            what = "was removed or cannot be read" if now == ABSENT else "changed"
        return _refusal(f"hook script {rel} {what}", version)
    for rel, entries in (folders or {}).items():
        now_entries = _entries(os.path.join(root, rel))
        if now_entries != entries:
            return _refusal(_listing_change(rel, entries, now_entries), version)
    return None
