"""file_ops: read, write, append and list files inside the project's sandbox directory.

Every path is resolved (symlinks followed) and must stay inside the sandbox, so `..`,
absolute paths elsewhere and symlinks pointing out are refused before any I/O happens.
Writes open the resolved path with O_NOFOLLOW, so a symlink swapped in after the check is
not followed either. Blocking file I/O runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Literal

from fim.tools.base import FunctionTool
from fim.tools.builtin._common import clip, fail, sandbox_dir
from fim.types import CallView, ToolResult

if TYPE_CHECKING:
    from fim.runtime import RunContext

CATEGORY = "files"
MAX_READ_CHARS = 100_000
DEFAULT_READ_CHARS = 20_000
MAX_WRITE_CHARS = 1_000_000
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_LIST = 500

Operation = Literal["read", "write", "append", "list"]


class Refused(Exception):
    """A path or request file_ops will not serve; the message is for the model."""


def confine(root: Path, path: str) -> Path:
    """Resolve `path` (relative to the sandbox `root`) and insist it stays inside it."""
    if "\x00" in path:
        raise Refused("the path contains a NUL character")
    raw = PurePath(path)
    if ".." in raw.parts:
        raise Refused(f"'{path}' contains '..'; paths must stay inside the sandbox")
    candidate = raw if raw.is_absolute() else root / raw
    resolved = Path(os.path.realpath(candidate))
    if resolved != root and root not in resolved.parents:
        why = "is a symlink that points" if resolved != Path(os.path.abspath(candidate)) else "is"
        raise Refused(
            f"'{path}' {why} outside the sandbox; use a path relative to the sandbox root "
            "such as 'notes/todo.txt'"
        )
    return resolved


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() or "."


def _read(root: Path, target: Path, max_chars: int) -> str:
    if not target.exists():
        raise Refused(f"'{_relative(root, target)}' does not exist; list the folder first")
    if target.is_dir():
        raise Refused(f"'{_relative(root, target)}' is a folder; use operation 'list'")
    size = target.stat().st_size
    with open(target, "rb") as handle:
        data = handle.read(max_chars * 4)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 4:  # not just a character cut at the read boundary
            raise Refused(
                f"'{_relative(root, target)}' is a binary file ({size} bytes), not UTF-8 text"
            ) from None
        text = data[: exc.start].decode("utf-8")
    clipped = text[:max_chars]
    if len(clipped) < len(text) or len(data) < size:
        clipped += f"\n[... file truncated: showing {len(clipped)} characters of {size} bytes]"
    return clipped


def _write(root: Path, target: Path, content: str, append: bool) -> str:
    if target.is_dir():
        raise Refused(f"'{_relative(root, target)}' is a folder; give a file path")
    data = content.encode("utf-8")
    existing = target.stat().st_size if append and target.exists() else 0
    if existing + len(data) > MAX_FILE_BYTES:
        raise Refused(f"the file would exceed {MAX_FILE_BYTES} bytes; write smaller files")
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    fd = os.open(target, flags, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    verb = "appended" if append else "wrote"
    return f"{verb} {len(data)} bytes to '{_relative(root, target)}'"


def _list(root: Path, target: Path, recursive: bool) -> str:
    if not target.exists():
        raise Refused(f"'{_relative(root, target)}' does not exist")
    if not target.is_dir():
        raise Refused(f"'{_relative(root, target)}' is a file; use operation 'read'")
    entries = sorted(target.rglob("*") if recursive else target.iterdir())
    lines = []
    for entry in entries[:MAX_LIST]:
        name = _relative(root, entry)
        if entry.is_symlink():
            lines.append(f"{name} -> (symlink)")
        elif entry.is_dir():
            lines.append(f"{name}/")
        else:
            lines.append(f"{name}  ({entry.stat().st_size} bytes)")
    if len(entries) > MAX_LIST:
        lines.append(f"[... {len(entries) - MAX_LIST} more entries not shown]")
    where = _relative(root, target)
    return f"{where}: {len(entries)} entries\n" + "\n".join(lines) if lines else f"{where}: empty"


def _call_view(args: dict[str, Any]) -> CallView:
    """What hooks see of one call: reads are `access: read`, so readonly_guard lets them
    through while writes stay `access: write`."""
    access = "read" if args.get("operation") in ("read", "list") else "write"
    return CallView("file_ops", args, {"access": access, "operation": args.get("operation")})


def make(ctx: RunContext) -> FunctionTool:
    """Build file_ops confined to the project's sandbox (`sandbox:` in fim.yaml)."""
    root = sandbox_dir(ctx)

    def execute(
        operation: Operation, path: str, content: str | None, recursive: bool, max_chars: int
    ) -> str:
        root.mkdir(parents=True, exist_ok=True)
        target = confine(root, path)
        if operation == "read":
            return _read(root, target, max_chars)
        if operation == "list":
            return _list(root, target, recursive)
        if content is None:
            raise Refused(f"operation '{operation}' needs 'content' (the text to write)")
        if len(content) > MAX_WRITE_CHARS:
            raise Refused(f"content is longer than {MAX_WRITE_CHARS} characters; split it")
        if target == root:
            raise Refused("give a file path to write to, not the sandbox root")
        return _write(root, target, content, append=operation == "append")

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
            "sandbox": str(root),
        },
    )
