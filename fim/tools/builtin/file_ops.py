"""file_ops: read, write, append and list files inside the project's sandbox directory.

Immune to symlink races: every path is opened component by component from a descriptor of
the sandbox root, never following a symlink in the kernel (`_paths`, which says how). Files
are opened `O_NONBLOCK` and must be regular files (a FIFO cannot hang the worker thread).
Blocking file I/O runs in a worker thread.

Quota: the whole sandbox directory may hold at most the agent's `sandbox.folder_mb` (2 GB by
default: the one cap of the folder, which `python_exec` and `shell` are held to too; counted
as allocated disk blocks; `make(ctx, quota_bytes=...)` changes it). A write or append that
would pass it is refused; concurrent writers can each overshoot by at most one write.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from fim import private
from fim.masking import known
from fim.tools.base import FunctionTool
from fim.tools.builtin._common import clip, fail, sandbox_dir
from fim.tools.builtin._paths import MAX_WALK, Refused, Root, show, split
from fim.tools.folder_walk import MAX_DEPTH, TooBig, walk
from fim.types import CallView, ToolResult

if TYPE_CHECKING:
    from fim.run.services import RunContext

CATEGORY = "files"
MAX_READ_CHARS = 100_000
DEFAULT_READ_CHARS = 20_000
MAX_WRITE_CHARS = 1_000_000
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_LIST = 500

Operation = Literal["read", "write", "append", "list"]


def _read_all(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit and (chunk := os.read(fd, min(65_536, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read(root: Root, path: str, max_chars: int) -> str:
    fd, parts = root.open(path, os.O_RDONLY | os.O_NONBLOCK, missing="; list the folder first")
    with os.fdopen(fd, "rb", buffering=0, closefd=True) as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise Refused(f"'{show(parts)}' is a folder; use operation 'list'")
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"'{show(parts)}' is not a regular file")
        size = info.st_size
        data = _read_all(handle.fileno(), max_chars * 4)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 4:  # not just a character cut at the read boundary
            raise Refused(
                f"'{show(parts)}' is a binary file ({size} bytes), not UTF-8 text"
            ) from None
        text = data[: exc.start].decode("utf-8")
    # masked before the cut (a file a program wrote may hold a secret of the sandbox's env)
    masker = known()
    clipped, cut = masker.head(text, max_chars)
    if not cut and len(data) < size:
        clipped = masker.edge(clipped)  # the read stopped inside the file: a cut too
    if cut or len(data) < size:
        clipped += f"\n[... file truncated: showing {len(clipped)} characters of {size} bytes]"
    return clipped


def _write(root: Root, path: str, content: str, append: bool, quota: int) -> str:
    data = content.encode("utf-8")
    if not split(root.path, path):
        raise Refused("give a file path to write to, not the sandbox root")
    flags = os.O_WRONLY | os.O_NONBLOCK | (os.O_APPEND if append else 0)
    try:
        fd, parts = root.open(path, flags, create_dirs=True)
    except FileNotFoundError:
        fd, parts = -1, []
    except IsADirectoryError:
        raise Refused(f"'{path}' is a folder; give a file path") from None
    try:
        existing = allocated = 0
        if fd >= 0:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Refused(f"'{show(parts)}' is not a regular file")
            existing, allocated = info.st_size, info.st_blocks * 512
        if (existing if append else 0) + len(data) > MAX_FILE_BYTES:
            raise Refused(f"the file would exceed {MAX_FILE_BYTES} bytes; write smaller files")
        used = root.usage() - (0 if append else allocated)
        if used + len(data) > quota:
            raise Refused(
                f"the sandbox folder would exceed its quota of {quota} bytes "
                f"({used} used); delete or shorten files first"
            )
        if fd < 0:  # created only now, so a refused write leaves no empty file behind
            fd, parts = root.open(path, flags | os.O_CREAT | os.O_EXCL, create_dirs=True)
        elif not append:
            os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        if fd >= 0:
            os.close(fd)
    verb = "appended" if append else "wrote"
    return f"{verb} {len(data)} bytes to '{show(parts)}'"


Entry = tuple[tuple[str, ...], str]
"""One line of a listing: the path below the folder listed, and what follows it."""


def _entries(dir_fd: int, recursive: bool) -> tuple[int, list[Entry]]:
    """How many entries the folder holds, and the first `MAX_LIST` of them by path (only
    those are kept: a path costs its depth), never following a symlink. A recursive listing
    walks without recursion and within bounds (fim/tools/folder_walk.py: `os.fwalk` raised
    RecursionError on a tree a program built 1,000 levels deep, attack-52 F1)."""
    total = 0

    def lines() -> Iterator[Entry]:
        nonlocal total
        found = walk(dir_fd, max_entries=MAX_WALK, max_depth=MAX_DEPTH, descend=recursive)
        for entry in found:
            total += 1
            yield entry.parts, _suffix(entry.info)

    try:
        first = heapq.nsmallest(MAX_LIST, lines())
    except TooBig as exc:
        raise Refused(f"the folder {exc}; list a sub-folder") from None
    return total, first


def _suffix(info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode):
        return " -> (symlink)"
    return "/" if stat.S_ISDIR(info.st_mode) else f"  ({info.st_size} bytes)"


def _list(root: Root, path: str, recursive: bool) -> str:
    try:
        fd, parts = root.open(path, os.O_RDONLY | os.O_DIRECTORY, missing="")
    except FileNotFoundError:
        raise Refused(f"'{path}' does not exist") from None
    except NotADirectoryError:
        raise Refused(f"'{path}' is a file; use operation 'read'") from None
    try:
        total, entries = _entries(fd, recursive)
    finally:
        os.close(fd)
    lines = ["/".join((*parts, *rel)) + suffix for rel, suffix in entries]
    if total > MAX_LIST:
        lines.append(f"[... {total - MAX_LIST} more entries not shown]")
    where = show(parts)
    return f"{where}: {total} entries\n" + "\n".join(lines) if lines else f"{where}: empty"


def _call_view(args: dict[str, Any]) -> CallView:
    """What hooks see of one call: reads are `access: read`, so readonly_guard lets them
    through while writes stay `access: write`."""
    access = "read" if args.get("operation") in ("read", "list") else "write"
    return CallView("file_ops", args, {"access": access, "operation": args.get("operation")})


def make(ctx: RunContext, *, quota_bytes: int | None = None) -> FunctionTool:
    """Build file_ops confined to the run's sandbox folder (`sandbox_dir`), holding it to
    the agent's `sandbox.folder_mb` unless `quota_bytes` says otherwise."""
    root_path = sandbox_dir(ctx)
    quota = quota_bytes or ctx.agent.sandbox.folder_mb * 1024 * 1024

    def execute(
        operation: Operation, path: str, content: str | None, recursive: bool, max_chars: int
    ) -> str:
        if operation in ("write", "append"):
            if content is None:
                raise Refused(f"operation '{operation}' needs 'content' (the text to write)")
            if len(content) > MAX_WRITE_CHARS:
                raise Refused(f"content is longer than {MAX_WRITE_CHARS} characters; split it")
        private.sandbox_folder(root_path)
        root = Root(root_path)
        try:
            if operation == "read":
                return _read(root, path, max_chars)
            if operation == "list":
                return _list(root, path, recursive)
            assert content is not None
            return _write(root, path, content, operation == "append", quota)
        finally:
            root.close()

    async def run(
        operation: Operation,
        path: str = ".",
        content: str | None = None,
        recursive: bool = False,
        max_chars: int = DEFAULT_READ_CHARS,
    ) -> str | ToolResult:
        try:
            result = await asyncio.to_thread(
                execute, operation, path, content, recursive, max_chars
            )
        except Refused as exc:
            return fail(f"{exc}.")
        except OSError as exc:
            return fail(f"{operation} '{path}' failed: {exc.strerror or exc}.")
        return clip(result, MAX_READ_CHARS + 200)

    return FunctionTool(
        name="file_ops",
        description=(
            "Read, write, append to or list files in your sandbox folder. Paths are "
            "relative to it (e.g. 'notes/todo.txt'; '..' is refused). 'write' replaces a "
            "file and creates folders. Files python_exec writes are under 'scratch/'."
        ),
        parameters={
            "type": "object",
            "properties": {
                "operation": {
                    "type": "string",
                    "enum": ["read", "write", "append", "list"],
                    "description": "What to do.",
                },
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File or folder relative to the sandbox root (default '.').",
                },
                "content": {
                    "type": "string",
                    "maxLength": MAX_WRITE_CHARS,
                    "description": "Text to write or append (write/append only).",
                },
                "recursive": {
                    "type": "boolean",
                    "description": "list: include sub-folders (default false).",
                },
                "max_chars": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_READ_CHARS,
                    "description": f"read: characters to return (default {DEFAULT_READ_CHARS}).",
                },
            },
            "required": ["operation"],
            "additionalProperties": False,
        },
        fn=run,
        category=CATEGORY,
        metadata={
            "builtin": True,
            "access": "write",
            "call_view": _call_view,
            "sandbox": str(root_path),
        },
    )
