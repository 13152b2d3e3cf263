"""Claude Code's vocabulary for fim's tools, so hook scripts written for it work unchanged.

| fim tool (what the hook view names)     | Claude Code name        | `tool_input`                 |
|-----------------------------------------|-------------------------|------------------------------|
| `shell`                                 | `Bash`                  | `command` (+ `timeout`)      |
| `file_ops` read / list                  | `Read` / `LS`           | `file_path` / `path`         |
| `file_ops` write / append               | `Write` / `Edit`        | `file_path`, `content`       |
| `web_fetch`                             | `WebFetch`              | `url` (+ fim's other args)   |
| MCP tool `<server>__<tool>`             | `mcp__<server>__<tool>` | the tool's own arguments     |

A matcher may use either name, and for an MCP tool or a connector's action also its whole
`{server}__{tool}` when fim shortened the name the model calls (`names_of`). Command hooks
get the Claude Code name and input in their JSON (fim's name stays under `fim.tool_name`);
an `updatedInput` in Claude Code's shape is mapped back to the fim tool's arguments by
`from_claude`. A `file_ops` path is given as Claude Code gives it, absolute (`files`: the
folder `file_ops` works in): a formatter hook reading `file_path` relative to the project
root checked another file, or none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fim.tools.naming import provider_safe

_FILE_OPS = {"read": "Read", "list": "LS", "write": "Write", "append": "Edit"}
_SIMPLE = {"shell": "Bash", "web_fetch": "WebFetch"}

NAMES: dict[str, tuple[str, ...]] = {
    "shell": ("Bash",),
    "file_ops": tuple(_FILE_OPS.values()),
    "web_fetch": ("WebFetch",),
}
"""Every Claude Code name a fim tool can appear as (for `fim validate`'s matcher check)."""


def mcp_alias(server: str, tool: str) -> str:
    return f"mcp__{server}__{tool}"


def _absolute(path: Any, files: Path | None) -> Any:
    if files is None or not isinstance(path, str) or Path(path).is_absolute():
        return path
    return str(files / path) if path not in ("", ".") else str(files)


def _relative(path: Any, files: Path | None) -> Any:
    """A path a hook gave back, as `file_ops` takes it: relative to `files` when inside."""
    if files is None or not isinstance(path, str) or not Path(path).is_absolute():
        return path
    try:
        return Path(path).relative_to(files).as_posix() or "."
    except ValueError:
        return path  # outside the folder: `file_ops` refuses it, saying why


def to_claude(
    name: str | None,
    args: dict[str, Any] | None,
    metadata: dict[str, Any],
    files: Path | None = None,
) -> tuple[str, dict[str, Any]] | None:
    """(Claude Code tool name, tool_input) of a call, or None where there is no equivalent;
    `file_ops` paths absolute under `files`."""
    if name is None:
        return None
    args = args or {}
    if name in _SIMPLE:
        return _SIMPLE[name], dict(args)
    if name == "file_ops":
        op = str(args.get("operation") or "")
        alias = _FILE_OPS.get(op)
        if alias is None:
            return None
        if op == "list":
            return alias, {"path": _absolute(args.get("path", "."), files)}
        view: dict[str, Any] = {"file_path": _absolute(args.get("path"), files)}
        if op in ("write", "append"):
            view["content"] = args.get("content")
        return alias, view
    server, tool = metadata.get("server"), metadata.get("tool")
    if metadata.get("category") == "mcp" and isinstance(server, str) and isinstance(tool, str):
        return mcp_alias(server, tool), dict(args)
    return None


def from_claude(
    name: str | None,
    updated: dict[str, Any],
    args: dict[str, Any] | None,
    files: Path | None = None,
) -> dict[str, Any]:
    """Arguments of the fim tool from a Claude Code `updatedInput` (the inverse of
    `to_claude`); keys Claude Code has no word for are kept from the original call."""
    args = dict(args or {})
    if name != "file_ops":
        return updated
    if "file_path" in updated:
        args["path"] = _relative(updated["file_path"], files)
    elif "path" in updated:
        args["path"] = _relative(updated["path"], files)
    for key in ("content", "new_string"):
        if key in updated:
            args["content"] = updated[key]
            break
    return args


def full_names(metadata: dict[str, Any]) -> list[str]:
    """The whole name of an MCP tool (`{server}__{tool}`) or a connector's action
    (`{connector}__{action}`) a call targets, and its spelling with `_` for characters
    providers refuse (fim's name for it before names were shortened with a digest):
    `fim.tools.naming.tool_name` may cut and digest the name the model calls, and a
    matcher written with the name the server or the declaration gives must still fire."""
    if metadata.get("category") == "mcp":
        owner, name = metadata.get("server"), metadata.get("tool")
    else:
        owner, name = metadata.get("connector"), metadata.get("action")
    if not isinstance(owner, str) or not isinstance(name, str):
        return []
    full = f"{owner}__{name}"
    return list(dict.fromkeys([full, provider_safe(full)]))


def names_of(name: str | None, args: dict[str, Any] | None, metadata: dict[str, Any]) -> list[str]:
    """The names a matcher is tried against: fim's (the name the model calls, perhaps
    shortened), the target's whole name (`full_names`), then Claude Code's if there is one.
    A hook whose matcher matches any of them runs (fail closed)."""
    if name is None:
        return []
    alias = to_claude(name, args, metadata)
    found = [name, *full_names(metadata), *([alias[0]] if alias is not None else [])]
    return list(dict.fromkeys(found))


__all__ = ["NAMES", "from_claude", "full_names", "mcp_alias", "names_of", "to_claude"]
