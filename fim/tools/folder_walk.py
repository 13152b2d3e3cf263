"""Every entry of a folder tree, walked without recursion and within fixed bounds.

Its own module because the sandbox's folder count (fim/tools/sandbox/limits.py
`held_bytes`) and `file_ops`' recursive listing walk a tree a sandboxed program built, and
both must survive any tree it can build (attack-52 F1): Python 3.11's `os.fwalk` recurses
one generator frame per level and holds a descriptor per level, so a folder 1,000 levels
deep raised RecursionError in the count before every later call, `rm -rf` included.

Here the walk is a loop over an explicit stack, depth first. A folder is listed with
`os.scandir` on a descriptor opened relative to its parent with `O_NOFOLLOW` (a symlink is
an entry, never followed). The folders above the one being walked stay open down to
`HELD_LEVELS`, as `os.fwalk` keeps them, so a folder renamed or removed meanwhile does not
lose the walk its way; deeper, only the folder being walked is open and the walk goes back
up through `..`, which must be the very folder (device and inode) it came down from, else
it stops. Each level is an entry of the one above, so the cap on entries bounds the depth,
the work and the memory, and the descriptors are at most `HELD_LEVELS` + 2 whatever the
depth.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

MAX_DEPTH = 256
"""Levels a recursive listing goes into (each of its lines names the whole path)."""
HELD_LEVELS = 64
"""Levels of folders the walk holds open while it is below them; deeper, it holds only the
folder it is in and comes back up through `..`."""

_DIR_FLAGS = (
    os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
"""Why a folder listed a moment ago may not open now: removed, or replaced by a file or (a
no-follow open) a symlink. It is left out, as a file removed meanwhile is."""


class TooBig(Exception):
    """The walk stopped: more entries or levels than it may visit, or the tree changed
    under it. The message completes "the folder ..."."""


@dataclass(frozen=True)
class Found:
    """One entry: its path below the top, its own name last (empty when the walk was
    asked for no paths), and its `lstat`."""

    parts: tuple[str, ...]
    info: os.stat_result


@dataclass
class _Level:
    """A folder from the top down to the one being walked."""

    fd: int
    """Its descriptor, or -1 once closed (deeper than `HELD_LEVELS`)."""
    identity: tuple[int, int]
    parts: tuple[str, ...]
    pending: list[str] | None = None
    """Its sub-folders still to enter, last first (None: not listed yet)."""


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def walk(
    top: int,
    *,
    max_entries: int,
    max_depth: int | None = None,
    paths: bool = True,
    descend: bool = True,
) -> Iterator[Found]:
    """Every entry below the folder open as `top` (the caller's descriptor, left open),
    depth first, symlinks not followed, each with its path unless `paths` is false (a path
    costs its depth). Raises `TooBig` once more than `max_entries` entries were met, a
    folder lies more than `max_depth` levels below `top`, or a folder deeper than
    `HELD_LEVELS` moved or went while the walk was below it; OSError for a folder that
    cannot be read. An entry removed (or a folder replaced) while the walk runs is left
    out. Without `descend`, only `top`'s own entries."""
    seen = 0
    stack = [_Level(top, _identity(top), ())]
    try:
        while stack:
            level = stack[-1]
            if level.pending is None:
                level.pending = []
                with os.scandir(level.fd) as listing:
                    for entry in listing:
                        seen += 1
                        if seen > max_entries:
                            raise TooBig(f"holds more than {max_entries} entries")
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        yield Found((*level.parts, entry.name) if paths else (), info)
                        if descend and stat.S_ISDIR(info.st_mode):
                            level.pending.append(entry.name)
                level.pending.reverse()  # taken from the end: entered in the listing's order
            if level.pending:
                _enter(stack, level.pending.pop(), max_depth, paths)
            else:
                _leave(stack)
    finally:
        for level in stack[1:]:
            if level.fd >= 0:
                os.close(level.fd)


def _enter(stack: list[_Level], name: str, max_depth: int | None, paths: bool) -> None:
    """Open the sub-folder `name` of the folder being walked and walk it next."""
    level = stack[-1]
    if max_depth is not None and len(stack) > max_depth:
        raise TooBig(f"has folders more than {max_depth} levels deep")
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=level.fd)
    except OSError as exc:
        if exc.errno in _GONE:
            return
        raise
    try:
        identity = _identity(child)
    except OSError:
        os.close(child)
        raise
    stack.append(_Level(child, identity, (*level.parts, name) if paths else ()))
    if len(stack) - 2 > HELD_LEVELS:  # the depth of `level` (the top's is 0)
        os.close(level.fd)
        level.fd = -1


def _leave(stack: list[_Level]) -> None:
    """Done with the folder being walked: back to the one above, reopened through `..`
    (it must be the very folder the walk came down from) when it was closed."""
    done = stack.pop()
    if not stack:
        return
    try:
        above = stack[-1]
        if above.fd < 0:
            try:
                up = os.open("..", _DIR_FLAGS, dir_fd=done.fd)
            except OSError:
                raise TooBig("changed while it was walked (a folder in it went)") from None
            if _identity(up) != above.identity:
                os.close(up)
                raise TooBig("changed while it was walked (a folder in it moved)")
            above.fd = up
    finally:
        os.close(done.fd)
