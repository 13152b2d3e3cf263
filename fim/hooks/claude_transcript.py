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

A call is written as the target hooks judge (`target`): the hook view recorded when the
model made it (`RunContext.views`), so a progressive `mcp` / `connector` / `database`
meta-tool call is `mcp__srv__danger` with the tool's own arguments, as on the hook's
stdin, not `mcp` with the wrapper's input (attack-59 F3: a guard counting earlier calls
in the transcript saw none in progressive mode, and its verdict depended on the tool mode).
A call with no recorded view (a history a test or library caller set) falls back to the
hook's own call, then to an MCP tool read from its `{server}__{tool}` name.

A delegate's lines (a run `call_agent` or a workflow's `agent` node started) carry
`"isSidechain": true` and `"agentId"` (the delegate's run id), as Claude Code marks a
subagent's lines; what the file holds around them is `fim.hooks.transcript_file`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fim.hooks.claude import to_claude

Target = Callable[[Any], tuple[str, dict[str, Any], dict[str, Any]]]
"""A transcript call's target as hooks see it: (name, arguments, metadata)."""


def call_targets(
    views: Mapping[str, Any],
    servers: Iterable[str],
    current: tuple[str, dict[str, Any], dict[str, Any]] | None = None,
) -> Target:
    """The target of each call of a transcript: the hook view recorded when the model made
    it (`views`, by call id: a meta-tool call is the tool it runs, with that tool's own
    arguments), else the hook's own call's (`current`: its name, arguments and metadata,
    whose `call_id` it is), else an MCP tool's read from its name (`{server}__{tool}` of a
    server of the project), else the call as the model made it."""
    names = sorted(servers, key=len, reverse=True)

    def of(call: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
        view = views.get(call.id)
        if view is not None:
            return view.name, view.args, view.metadata
        if current is not None and current[2].get("call_id") == call.id:
            return current
        for server in names:
            if call.name.startswith(f"{server}__") and len(call.name) > len(server) + 2:
                meta = {"category": "mcp", "server": server, "tool": call.name[len(server) + 2 :]}
                return call.name, call.arguments, meta
        return call.name, call.arguments, {}

    return of


def entry(message: Any, session_id: str, files: Path | None, target: Target) -> dict[str, Any]:
    """One transcript line for `message` (a `fim.types.Message`), its calls named as
    `target` tells."""
    role = message.role
    body: dict[str, Any]
    if role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for call in message.tool_calls:
            name, args, meta = target(call)
            name, given = to_claude(name, args, meta, files) or (name, args)
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


__all__ = ["Target", "call_targets", "entry"]
