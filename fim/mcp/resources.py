"""A server's resources and prompts as observations: list them, read one, get one.

Its own module because these are the protocol's other two features, offered in both modes
(`{server}__read_resource` and friends in legacy mode, `mcp` subcommands in progressive
mode): listing limits and how contents are shown change here, not in the call path.
"""

from __future__ import annotations

import json
from typing import Any

from fim.masking import known
from fim.mcp.calls import guarded
from fim.mcp.connection import ServerConnection
from fim.mcp.content import render_content
from fim.mcp.results import media_of
from fim.types import ToolResult

MAX_LISTED = 100
MAX_ABOUT = 200
"""The most of one description a listing shows."""


def about(description: str) -> str:
    """The first `MAX_ABOUT` characters of a description the server wrote, for a listing.
    Masked whole, then cut (`Masker.head`): a server may describe itself with what its
    `env:` gave it (a database URL with its password), and a cut falling inside a secret
    left a piece of it that the listing's mask no longer matches."""
    shown, cut = known().head(description, MAX_ABOUT)
    return shown + "..." if cut else shown


async def list_resources(conn: ServerConnection) -> ToolResult:
    """The server's resources and resource templates, one line each."""
    meta = {"server": conn.name, "tool": "list_resources"}
    listing = await guarded(
        conn,
        f"listing resources of '{conn.name}'",
        lambda: conn.request(_resources),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(listing, ToolResult):
        return listing
    resources, templates = listing
    counted = f"{len(resources)}" if len(resources) <= MAX_LISTED else f"more than {MAX_LISTED}"
    lines = [f"Server '{conn.name}': {counted} resources"]
    for res in resources[:MAX_LISTED]:
        mime = f" ({res.mime_type})" if res.mime_type else ""
        said = f": {about(res.description)}" if res.description else ""
        lines.append(f"- {res.uri} {res.name}{mime}{said}")
    if len(resources) > MAX_LISTED:
        lines.append("... and more (read one by its URI)")
    if templates:
        lines.append("Templates (fill in the {placeholders} to make a URI):")
        for tpl in templates[:MAX_LISTED]:
            said = f": {about(tpl.description)}" if tpl.description else ""
            lines.append(f"- {tpl.uri_template} {tpl.name}{said}")
    return ToolResult(content=conn.mask("\n".join(lines)), metadata=meta)


async def _resources(client: Any) -> tuple[list[Any], list[Any]]:
    """The first pages of resources, until more than `MAX_LISTED` are in hand: the SDK
    reads each page on the event loop, and a server listing hundreds of thousands of them
    held it seconds a call for a list cut to `MAX_LISTED` (attack-37 #4)."""
    resources: list[Any] = []
    cursor: str | None = None
    for _page in range(10):
        page = await client.list_resources(cursor=cursor)
        resources += page.resources
        cursor = page.next_cursor
        if not cursor or len(resources) > MAX_LISTED:
            break
    try:
        templates = list((await client.list_resource_templates()).resource_templates)
    except Exception:  # optional part of the protocol
        templates = []
    return resources, templates


async def read_resource(conn: ServerConnection, uri: Any) -> ToolResult:
    """One resource's contents: text inline, images and audio as placeholders plus
    `metadata["media"]`, other binary summarised."""
    meta: dict[str, Any] = {"server": conn.name, "tool": "read_resource", "uri": str(uri)}
    if not isinstance(uri, str) or not uri or len(uri) > 4096:
        return ToolResult(
            content="Error: read_resource needs `uri`, a resource URI from `resources`.",
            is_error=True,
            metadata=meta,
        )
    result = await guarded(
        conn,
        f"reading resource '{uri}' of '{conn.name}'",
        lambda: conn.request(lambda c: c.read_resource(uri)),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(result, ToolResult):
        return result
    # deferred: loading fim.run.budget costs a few ms
    from fim.run.budget import bounded

    blocks = [_embedded(c) for c in result.contents]
    text = "\n".join(render_content(b) for b in blocks) or "(the resource is empty)"
    text = bounded(text, "the resource is larger than one observation")
    media = media_of(blocks)
    if media:
        meta["media"] = media
    return ToolResult(content=text, metadata=meta)


def _embedded(contents: Any) -> Any:
    # deferred: loading mcp_types costs hundreds of ms
    import mcp_types

    return mcp_types.EmbeddedResource(type="resource", resource=contents)


async def list_prompts(conn: ServerConnection) -> ToolResult:
    meta = {"server": conn.name, "tool": "list_prompts"}
    listing = await guarded(
        conn,
        f"listing prompts of '{conn.name}'",
        lambda: conn.request(lambda c: c.list_prompts()),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(listing, ToolResult):
        return listing
    lines = [f"Server '{conn.name}': {len(listing.prompts)} prompts"]
    for prompt in listing.prompts[:MAX_LISTED]:
        args = ", ".join(f"{a.name}{'' if a.required else '?'}" for a in (prompt.arguments or []))
        said = f": {about(prompt.description)}" if prompt.description else ""
        lines.append(f"- {prompt.name}({args}){said}")
    return ToolResult(content=conn.mask("\n".join(lines)), metadata=meta)


async def get_prompt(conn: ServerConnection, name: Any, arguments: Any) -> ToolResult:
    """A prompt's messages as `role: text` lines (media as placeholders plus metadata)."""
    meta: dict[str, Any] = {"server": conn.name, "tool": "get_prompt", "prompt": str(name)}
    if not isinstance(name, str) or not name:
        return ToolResult(
            content="Error: get_prompt needs `name`, a prompt from `prompts`.",
            is_error=True,
            metadata=meta,
        )
    args = arguments or {}
    if not isinstance(args, dict):
        return ToolResult(
            content="Error: `arguments` must be an object of strings.", is_error=True, metadata=meta
        )
    args = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
    result = await guarded(
        conn,
        f"prompt '{name}' of '{conn.name}'",
        lambda: conn.request(lambda c: c.get_prompt(name, args)),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(result, ToolResult):
        return result
    blocks = [m.content for m in result.messages]
    lines = [f"{m.role}: {render_content(m.content)}" for m in result.messages]
    if result.description:
        lines.insert(0, f"({result.description})")
    media = media_of(blocks)
    if media:
        meta["media"] = media
    # deferred: loading fim.run.budget costs a few ms
    from fim.run.budget import bounded

    text = bounded("\n".join(lines) or "(the prompt is empty)", "the prompt is very long")
    return ToolResult(content=text, metadata=meta)
