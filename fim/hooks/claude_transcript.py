"""A run's messages as the lines of a Claude Code transcript (the file `transcript_path`
names), so a hook script that reads one works unchanged.

Claude Code writes one JSON object a line, `type` `user` or `assistant`, the Anthropic
message under `message`:

- a prompt: `{"type": "user", "message": {"role": "user", "content": "..."}}` (a list of
  `text` and `image` blocks when it came with images);
- an answer: `{"type": "assistant", "message": {"role": "assistant", "content": [...]}}`,
  its blocks `{"type": "text", "text"}` and `{"type": "tool_use", "id", "name", "input"}`;
- a tool's result: `{"type": "user", "message": {"role": "user", "content":
  [{"type": "tool_result", "tool_use_id", "content"}]}}`.

Tool names and inputs are Claude Code's where fim has an equivalent, as on a hook's stdin
(`fim.hooks.claude.to_claude`: `shell` is `Bash`, a `file_ops` read is `Read` with an
absolute `file_path`), so `jq '.message.content[]? | select(.type == "tool_use")'` finds
the calls and `.name == "Bash"` the shell ones. fim wrote its own message dump before
(`tool_calls`, `type: tool`), and those scripts found nothing. Each line also carries
`sessionId`. A system message a client sent (fim's own prompt is not in the transcript) is
`{"type": "system", "content": "..."}`, like Claude Code's own system lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fim.hooks.claude import to_claude

Metadata = Callable[[Any], dict[str, Any]]
"""The metadata of a tool call (its MCP server and tool), for its Claude Code name."""


def mcp_metadata(servers: Iterable[str], current: dict[str, Any]) -> Metadata:
    """The metadata `to_claude` needs for a call of the transcript: the hook's own call's
    (`current`, whose `call_id` it is), else an MCP tool's read from its name
    (`{server}__{tool}` of a server of the project), else none."""
    names = sorted(servers, key=len, reverse=True)

    def of(call: Any) -> dict[str, Any]:
        if current.get("call_id") and current.get("call_id") == call.id:
            return current
        for server in names:
            if call.name.startswith(f"{server}__") and len(call.name) > len(server) + 2:
                return {"category": "mcp", "server": server, "tool": call.name[len(server) + 2 :]}
        return {}

    return of


def entry(message: Any, session_id: str, files: Path | None, metadata: Metadata) -> dict[str, Any]:
    """One transcript line for `message` (a `fim.types.Message`)."""
    role = message.role
    body: dict[str, Any]
    if role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for call in message.tool_calls:
            claude = to_claude(call.name, call.arguments, metadata(call), files)
            name, given = claude or (call.name, call.arguments)
            blocks.append({"type": "tool_use", "id": call.id, "name": name, "input": given})
        body = {"type": "assistant", "message": {"role": "assistant", "content": blocks}}
    elif role == "tool":
        result = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content or "",
        }
        body = {"type": "user", "message": {"role": "user", "content": [result]}}
    elif role == "user":
        content: Any = message.content or ""
        if message.images:
            content = [{"type": "text", "text": content}] if content else []
            content += [_image(url) for url in message.images]
        body = {"type": "user", "message": {"role": "user", "content": content}}
    else:
        body = {"type": "system", "content": message.content or ""}
    body["sessionId"] = session_id
    return body


def _image(url: str) -> dict[str, Any]:
    """An image block as the Anthropic API writes it: base64 for a `data:` URL."""
    if url.startswith("data:") and ";base64," in url:
        media, _, data = url[5:].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


__all__ = ["entry", "mcp_metadata"]
