"""An MCP server's tool list: fetched page by page, kept in the tool-list cache, and
announced to waiters when the server says it changed.

Its own module because what fim offers of a server's tools (which tools, from the cache
or live, when they count as changed) changes for other reasons than how the session runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from fim.mcp.cache import cache_key, load, store
from fim.mcp.info import ToolInfo, leaks, masked, tool_info
from fim.mcp.state import ConnectionState

log = logging.getLogger(__name__)

MAX_TOOL_PAGES = 50
MAX_TOOLS = 2000
"""Tools of one server fim keeps at most (the first ones listed; a warning says so)."""
MAX_SCHEMA_CHARS = 65_536
"""The longest input schema (as JSON) a server's tool may have to be offered."""


class ToolList(ConnectionState):
    """The tool list of a connection (the server's `tools/list`, or the cache's copy)."""

    @property
    def usable(self) -> bool:
        """Running, or about to be with its tools known from the cache: its tools can be
        offered now; a call waits for the start."""
        return self.state == "ready" or (self.from_cache and self.state in ("stopped", "starting"))

    def prime_from_cache(self) -> bool:
        """Take the tool list from the cache before the server runs; True if it did."""

        if self.usable:
            return True
        if self.state != "stopped":
            return False  # failed or crashed: the run waits for the restart, as before
        key = cache_key(self.decl, self.root)
        listing = load(self.root, key) if key else None
        if listing is None:
            return False
        # masked again: an entry of an older fim, or one written before a secret was added
        self.tools = [masked(t, self.mask) for t in self._offered(listing["tools"])]
        self.server_name = self.mask(listing["server_name"]) if listing["server_name"] else None
        version = listing["server_version"]
        self.server_version = self.mask(str(version)) if version else None
        self.has_resources = listing["has_resources"]
        self.has_prompts = listing["has_prompts"]
        self.from_cache = True
        return True

    def _offered(self, tools: list[ToolInfo]) -> list[ToolInfo]:
        """`tools` but those whose name or a schema property name holds a secret: neither
        can be masked (calls are matched by them), and the model provider would read the
        secret with every tool list. The warning names the tool masked."""
        kept: list[ToolInfo] = []
        for info in tools:
            if leaks(info, self.mask):
                log.warning(
                    "MCP server '%s': tool '%s' is not offered: its name or a property name "
                    "of its schema holds a secret (masked here), which would reach the model "
                    "provider in every tool list",
                    self.name,
                    self.mask(info.name),
                )
                continue
            kept.append(info)
        return kept

    async def wait_tools_changed(self, since: int, timeout: float) -> bool:
        """Wait until the cached tool list is newer than version `since`."""
        async with self._tools_changed:
            try:
                await asyncio.wait_for(
                    self._tools_changed.wait_for(lambda: self.tools_version > since), timeout
                )
            except TimeoutError:
                return False
        return True

    async def _remember_tools(self) -> None:
        """Write the live listing to the tool-list cache when it differs from the entry."""

        key = cache_key(self.decl, self.root)
        if key is None:
            return
        listing = {
            "tools": self.tools,
            "server_name": self.server_name,
            "server_version": self.server_version,
            "has_resources": self.has_resources,
            "has_prompts": self.has_prompts,
        }
        if await asyncio.to_thread(load, self.root, key) != listing:
            await asyncio.to_thread(store, self.root, key, listing)

    async def _fetch_tools(self, client: Any) -> None:
        tools: list[ToolInfo] = []
        cursor: str | None = None
        for _page in range(MAX_TOOL_PAGES):
            listing = await client.list_tools(cursor=cursor)
            for tool in listing.tools:
                execution = getattr(tool, "execution", None)
                if getattr(execution, "task_support", None) == "required":
                    # fim does not run MCP tasks (tasks/get, tasks/result polling); offering
                    # the tool would only produce failing calls.
                    log.info(
                        "MCP server '%s': tool '%s' requires task-augmented execution, "
                        "which fim does not support; not offered",
                        self.name,
                        tool.name,
                    )
                    continue
                size = len(json.dumps(tool.input_schema or {}, default=str))
                if size > MAX_SCHEMA_CHARS:
                    # sent with every model call in legacy mode, shown by `discover`: a
                    # server's bloated schema would be paid for on every turn
                    log.warning(
                        "MCP server '%s': tool '%s' is not offered: its input schema has "
                        "%d characters (at most %d)",
                        self.name,
                        tool.name,
                        size,
                        MAX_SCHEMA_CHARS,
                    )
                    continue
                tools.extend(masked(t, self.mask) for t in self._offered([tool_info(tool)]))
            cursor = listing.next_cursor
            if len(tools) >= MAX_TOOLS:
                log.warning(
                    "MCP server '%s' lists more than %d tools: only the first %d are offered",
                    self.name,
                    MAX_TOOLS,
                    MAX_TOOLS,
                )
                del tools[MAX_TOOLS:]
                break
            if not cursor:
                break
        self.tools = tools
        self.from_cache = False
        if self.server_version:  # the session has just set it from the server's serverInfo
            self.server_version = self.mask(str(self.server_version))
        caps = getattr(client, "server_capabilities", None)
        self.has_resources = getattr(caps, "resources", None) is not None
        self.has_prompts = getattr(caps, "prompts", None) is not None
        async with self._tools_changed:
            self.tools_version += 1
            self._tools_changed.notify_all()
