"""Paths inside the sandbox, opened without symlink races: file_ops' confinement, kept apart
from the tool so the security-critical walk reads on its own (not a tool: the leading `_`
keeps it out of discovery).

Immune to symlink races: no path is ever checked and then opened. Every component is opened
relative to the directory before it (`openat`: `os.open(name, dir_fd=...)`) with
`O_NOFOLLOW` (and `O_DIRECTORY` for folders), starting from a descriptor of the sandbox root,
so the kernel never follows a symlink for us. A symlink met on the way is read
(`readlinkat`) and its target re-walked from the root the same way: one that stays inside is
followed, one that points outside (or through `..` above the root) is refused. `..` in a
path and absolute paths elsewhere are refused before any I/O.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path, PurePosixPath
from typing import NoReturn

MAX_WALK = 100_000
"""Entries a recursive listing or the quota count visits at most."""
MAX_LINKS = 40

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC


class Refused(Exception):
    """A path or request file_ops will not serve; the message is for the model."""


class _Link(Exception):
    """A symlink met while walking: where it is and what it points to."""

    def __init__(self, before: list[str], target: str, rest: list[str]) -> None:
        self.before, self.target, self.rest = before, target, rest


def _outside(path: str, why: str = "is") -> Refused:
    return Refused(
        f"'{path}' {why} outside the sandbox; use a path relative to the sandbox root "
        "such as 'notes/todo.txt'"
    )


def split(root: Path, path: str) -> list[str]:
    """The components of `path` below `root`, checked lexically (no I/O)."""
    if "\x00" in path:
        raise Refused("the path contains a NUL character")
    raw = PurePosixPath(path)
    if ".." in raw.parts:
        raise Refused(f"'{path}' contains '..'; paths must stay inside the sandbox")
    if raw.is_absolute():
        try:
            raw = raw.relative_to(root)
        except ValueError:
            raise _outside(path) from None
    return [p for p in raw.parts if p not in ("", ".")]


def _retarget(root: Path, link: _Link, path: str) -> list[str]:
    """The components a symlink leads to, resolved against the real folders before it."""
    target = PurePosixPath(link.target)
    if target.is_absolute():
        try:
            # textual: `<root>/../x` is "below" the root here, its `..` kept for the loop
            steps = target.relative_to(root).parts
        except ValueError:
            raise _outside(path, "is a symlink that points") from None
        parts: list[str] = []
    else:
        steps, parts = target.parts, list(link.before)
    for part in steps:
        if part == "..":
            if not parts:
                raise _outside(path, "is a symlink that points")
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return parts + link.rest


def _link_or_raise(
    exc: OSError, name: str, dir_fd: int, before: list[str], rest: list[str]
) -> NoReturn:
    """After ELOOP/ENOTDIR from a no-follow open: a symlink becomes `_Link`, anything else
    re-raises the original error."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            raise exc from None
        raise _Link(before, target, rest) from None
    raise exc


def _open_parts(root_fd: int, parts: list[str], flags: int, create_dirs: bool) -> int:
    """Open `parts` below `root_fd`, one no-follow `openat` per component.

    The walk's own guarantee, whatever a caller's parsing let through: a component that
    is `..`, empty or holds a `/` would leave the directory it is opened in, so none is
    ever opened."""
    if any(name in ("", ".", "..") or "/" in name for name in parts):
        raise Refused(f"'{show(parts)}' is not a path inside the sandbox")
    if not parts:
        return os.open(".", flags | _CLOEXEC, dir_fd=root_fd)
    current = root_fd
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=current)
            except FileNotFoundError:
                if not create_dirs:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=current)
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=current)
                except OSError as exc:
                    _link_or_raise(exc, name, current, parts[:i], parts[i + 1 :])
            except OSError as exc:
                _link_or_raise(exc, name, current, parts[:i], parts[i + 1 :])
            if current != root_fd:
                os.close(current)
            current = fd
        name = parts[-1]
        try:
            return os.open(name, flags | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=current)
        except OSError as exc:
            _link_or_raise(exc, name, current, parts[:-1], [])
    finally:
        if current != root_fd:
            os.close(current)


class Root:
    """The sandbox root, held open: every path is walked from this descriptor."""

    def __init__(self, root: Path) -> None:
        self.path = root
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    def open(
        self, path: str, flags: int, *, create_dirs: bool = False, missing: str = ""
    ) -> tuple[int, list[str]]:
        """Open `path` (symlinks inside the sandbox followed by re-walking, never by the
        kernel) and return the descriptor with the real components it was found at."""
        parts = split(self.path, path)
        for _ in range(MAX_LINKS):
            try:
                return _open_parts(self.fd, parts, flags, create_dirs), parts
            except _Link as link:
                parts = _retarget(self.path, link, path)
            except FileNotFoundError:
                if missing:
                    raise Refused(f"'{show(parts)}' does not exist{missing}") from None
                raise
        raise Refused(f"'{path}' goes through more than {MAX_LINKS} symlinks")

    def usage(self) -> int:
        """Bytes allocated under the root (symlinks not followed), for the quota."""
        # deferred: the sandbox package costs a few ms, only once a file is written
        from fim.tools.sandbox.limits import MAX_FOLDER_FILES, held_bytes

        held = held_bytes(self.fd)
        if held is None:
            raise Refused(f"the sandbox holds more than {MAX_FOLDER_FILES} files; delete some")
        return held


def show(parts: list[str]) -> str:
    return "/".join(parts) or "."
