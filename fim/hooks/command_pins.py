"""A command hook's scripts, held to the snapshot: `hooks/x.sh` runs only as compiled.

The compile records the sha256 of every project file a hook command names
(`fim.build.hook_checks.pin_commands`, `Snapshot.command_files`, part of the version). Before
the command runs, each file is checked against it; a script edited, replaced or removed since
blocks the call (hooks fail closed) with a message saying so, until a reload that checks the
edit swaps in a snapshot that pins the new bytes. The script is run in place (its interpreter
line, its own folder and what it sources all work as written), so this is a check at start:
an edit in the instant between the check and the shell's start is not seen, and files a
script reads or sources itself are not pinned.

A file is hashed again only when its stat (inode, size, mtime, ctime) changed since the last
check; ctime moves on every write and cannot be set back, and a file changed in the same
tick it was hashed is hashed again next time (as `fim.config.files` treats racy reads).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from fim.build.hook_checks import MAX_SCRIPT_BYTES
from fim.config.files import read_regular

_RACY_NS = 2_000_000_000
"""A file changed this close to its hashing is hashed again on the next check."""

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
        if len(_HASHED) >= 1024:
            _HASHED.clear()
        _HASHED[path] = (key, sha)
    return sha


def changed_script(root: str | Path, pins: tuple[tuple[str, str], ...], version: str) -> str | None:
    """Why the command may not run (a file it names is not the one snapshot `version`
    compiled), or None when every pinned file is as compiled."""
    for rel, sha in pins:
        now = _sha256(os.path.join(root, rel))
        if now == sha:
            continue
        what = "was removed or cannot be read" if now is None else "changed"
        return (
            f"hook script {rel} {what} since snapshot {version} was compiled, so it was not "
            "run and the call is blocked (hooks fail closed); the next reload checks the "
            "change and runs it (`fim validate` shows what it says)"
        )
    return None
