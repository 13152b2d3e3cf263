"""A stdio server's tool list, cached between processes so a run need not wait for it.

Listing tools means starting the server (for a Python server, importing the `mcp` SDK
twice: once here, once there), which is most of a short `fim run`. With the list cached,
the run builds its prompt from the cache and starts the server in the background,
concurrently with the first model call; a call waits for the server as before.

An entry lives in the project's `.fim/cache/mcp-tools/` and is keyed by the declaration
(command, arguments, environment, working directory) and the size and modification time
of the command's executable and of every argument that names a file (the script of
`python server.py`): editing or upgrading the server changes the key. The server's own
reported name and version are kept too; when a started server reports another version,
or lists other tools, the entry is rewritten and the live list is what the run uses.
Only stdio servers are cached (an HTTP server's tools can change without any local sign).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fim import private
from fim.config.files import write_inside
from fim.config.schema import McpServer, StdioServer
from fim.mcp.info import ToolInfo, declaration_key

log = logging.getLogger(__name__)

FOLDER = Path(".fim") / "cache" / "mcp-tools"
MAX_BYTES = 4_000_000
"""The largest entry `load` reads; `store` writes none larger (one it would not read back
was rewritten, whole, on every start)."""
VERSION = 2
"""2: entries hold only tools of fim's listing rules (`fim.mcp.tool_list`); those of
version 1 were written before them."""


def _stat(path: Path) -> str | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return f"{path}:{info.st_size}:{info.st_mtime_ns}"


def cache_key(decl: McpServer, root: Path) -> str | None:
    """The entry's name for this declaration as it is on disk now, or None (not cached)."""
    if not isinstance(decl, StdioServer):
        return None
    cwd = (root / decl.cwd) if decl.cwd else root
    path = decl.env.get("PATH") or os.environ.get("PATH")
    command = shutil.which(decl.command, path=path) if "/" not in decl.command else None
    parts = [f"v{VERSION}", declaration_key(decl, root), _stat(Path(command or cwd / decl.command))]
    for arg in decl.args:
        if arg.startswith("-") or len(arg) > 1024:
            continue
        candidate = Path(arg) if os.path.isabs(arg) else cwd / arg
        if candidate.is_file():
            parts.append(_stat(candidate))
    return hashlib.sha256("|".join(p or "-" for p in parts).encode()).hexdigest()[:24]


def _file(root: Path, key: str) -> Path:
    return root / FOLDER / f"{key}.json"


def load(root: Path, key: str) -> dict[str, Any] | None:
    """The cached listing (`tools` as ToolInfos), or None when absent or unusable."""
    path = _file(root, key)
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        tools = [
            ToolInfo(
                name=str(t["name"]),
                description=str(t.get("description") or ""),
                input_schema=dict(t.get("input_schema") or {}),
                title=t.get("title") if isinstance(t.get("title"), str) else None,
                access="read" if t.get("access") == "read" else "write",
                output_schema=dict(t["output_schema"]) if t.get("output_schema") else None,
            )
            for t in data["tools"]
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return {
        "tools": tools,
        "server_name": data.get("server_name"),
        "server_version": data.get("server_version"),
        "has_resources": bool(data.get("has_resources")),
        "has_prompts": bool(data.get("has_prompts")),
    }


def store(root: Path, key: str, listing: dict[str, Any]) -> None:
    """Write the entry (atomically: a concurrent reader sees the old or the new file)."""
    path = _file(root, key)
    body = {**listing, "tools": [asdict(t) for t in listing["tools"]]}
    text = json.dumps(body, ensure_ascii=False)
    try:
        if len(text.encode()) > MAX_BYTES:  # rare: `tool_list.MAX_LIST_CHARS` is below it
            log.info("the tool list of an MCP server is too large to cache: %s not written", path)
            path.unlink(missing_ok=True)  # an older entry would be read in its place
            return
        private.parents(path)
        write_inside(root, path, text)
    except OSError as exc:  # a read-only checkout still runs, only slower
        log.debug("cannot cache the tools of an MCP server in %s: %s", path, exc)
