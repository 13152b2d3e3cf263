"""An MCP server's tool list: fetched page by page, kept in the tool-list cache, and
announced to waiters when the server says it changed.

Its own module because what fim offers of a server's tools (which tools, from the cache
or live, when they count as changed) changes for other reasons than how the session runs.

A server's tool list is a third party's text, read into every tool list fim sends and kept
for the connection's life. So fim keeps only what it can bound: names of MCP's rule, cut
descriptions and titles, schemas of at most `MAX_SCHEMA_CHARS` that are JSON Schemas, and
at most `MAX_LIST_CHARS` in all; and it re-lists at most once every `REFRESH_SECONDS` (or
longer, after a slow listing) however often the server says its list changed (attack-32
#1, #2). A listing is checked and masked in a thread: thousands of tools took the event
loop seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fim.mcp.cache import cache_key, load, store
from fim.mcp.info import ToolInfo, leaks, masked, tool_info
from fim.mcp.naming import conforming
from fim.mcp.pacing import in_thread
from fim.mcp.state import ConnectionState
from fim.schema_check import schema_problem

log = logging.getLogger(__name__)

MAX_TOOL_PAGES = 50
MAX_TOOLS = 2000
"""Tools of one server fim keeps at most (the first ones listed; a warning says so)."""
MAX_SCHEMA_CHARS = 65_536
"""The longest input or output schema (as JSON) a server's tool may have to be offered."""
MAX_DESCRIPTION_CHARS = 8192
"""A tool's description is cut to this (legacy mode sends 1,024 characters of it; `discover`
shows it whole)."""
MAX_TITLE_CHARS = 256
MAX_LIST_CHARS = 3_000_000
"""The most one server's kept tools may hold in all (names, descriptions, titles and
schemas, as JSON with non-ASCII escaped: never more bytes than that); the tools past it
are not offered, with a warning. Below the tool-list cache's `MAX_BYTES`, so a listing kept
is one the cache reads back, and a few seconds of work at most."""
REFRESH_SECONDS = 5.0
"""After a refresh, the next waits at least this long (a change notice in between leaves
one refresh waiting, never more): a server announcing changes without end had fim re-list
back to back and held its event loop for good."""
REFRESH_COST = 10
"""...and at least this many times as long as the last refresh took (up to
`MAX_REFRESH_SECONDS`): the SDK reads a listing on the event loop, a second for a few
megabytes, so a big listing is re-read less often."""
MAX_REFRESH_SECONDS = 60.0
REFRESH_BURST = 2
"""Refreshes that may run back to back before the pause applies: a server that changes its
list twice in a row (two toolsets enabled) is seen at once."""
PROBE_SECONDS = 5.0
"""How long a server may take to list its resources or prompts when it starts; past it (or
on an error) it is taken to have some, as its capability says."""
MAX_CHECKED = 4096
"""Schemas whose check is remembered per connection (see `ConnectionState._checked`)."""


@dataclass
class _Page:
    """What fim keeps of one page of a listing (`ToolList._keep`)."""

    kept: list[ToolInfo] = field(default_factory=list)
    size: int = 0
    misnamed: list[str] = field(default_factory=list)
    full: bool = False
    """`MAX_LIST_CHARS` was reached: the rest of the listing is not offered."""


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


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
        secret with every tool list. The warning names the tool masked. Nor one whose name
        breaks MCP's rule (an entry of an older fim's cache)."""
        kept: list[ToolInfo] = []
        misnamed = [info.name for info in tools if not conforming(info.name)]
        self._warn_misnamed(misnamed)
        for info in tools:
            if not conforming(info.name):
                continue
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

    def listed(self, name: str) -> ToolInfo | None:
        """Tool `name` as the connection lists it now (the server's latest listing, or the
        cache's copy before the server answered), or None: a dict lookup, the index made
        again only when `tools` is replaced (the first of two tools of one name wins)."""
        tools = self.tools
        if self._listed_from is not tools:
            self._listed = {info.name: info for info in reversed(tools)}
            self._listed_from = tools
        return self._listed.get(name)

    def access(self, name: str) -> Literal["read", "write"]:
        """What a call of tool `name` is for `read_only` and `confirm`, judged by the listing
        held at call time (the `mcp` meta-tool's and every legacy tool's rule): a read only
        when the server hints the listed tool read-only. Not listed now (the server has not
        started, dropped the tool, or the model names one it never listed): the call may
        reach a tool whose hints no hook saw, so a write."""
        info = self.listed(name)
        return (info.access if info is not None else None) or "write"

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
        if await in_thread(self.budget, load, self.root, key) != listing:
            await in_thread(self.budget, store, self.root, key, listing)

    def _warn_misnamed(self, names: list[str]) -> None:
        """One warning for the tools not offered for their names: how many, and the first
        three (masked, escaped and cut: they are what no name should be)."""
        if not names:
            return
        shown = ", ".join(self._shown(name) for name in names[:3])
        log.warning(
            "MCP server '%s': %d tool%s not offered: a tool name must be 1 to 128 characters "
            "of A-Z a-z 0-9 _ - . (MCP's rule): %s%s",
            self.name,
            len(names),
            "s are" if len(names) != 1 else " is",
            shown,
            ", ..." if len(names) > 3 else "",
        )

    def _shown(self, name: str) -> str:
        """A name no tool should have, for a log line: masked whole, then cut to 40
        characters and escaped (cut first, a secret crossing the cut showed in part)."""
        text = self.mask(name)
        return repr(text[:40]) + ("..." if len(text) > 40 else "")

    def refresh_wait(self) -> float:
        """Seconds until a refresh may run: `REFRESH_BURST` back to back, then one each
        `refresh_pause()`, counted from the end of the last (on `clock`)."""
        credit = self._credit()
        return 0.0 if credit >= 1 else (1 - credit) * self.refresh_pause()

    def refresh_pause(self) -> float:
        """The pause between refreshes: longer after a slow one (`REFRESH_COST`)."""
        return min(MAX_REFRESH_SECONDS, max(REFRESH_SECONDS, REFRESH_COST * self.refresh_took))

    def _credit(self) -> float:
        if self.refreshed_at is None:
            return float(REFRESH_BURST)
        earned = max(0.0, self.clock() - self.refreshed_at) / self.refresh_pause()
        return min(float(REFRESH_BURST), self.refresh_credit + earned)

    async def refresh_turn(self) -> None:
        """Wait until a refresh may run, then take its turn (the caller holds `refreshing`;
        `refresh_queued` stays set meanwhile, so the notices of the pause add nothing)."""
        while (wait := self.refresh_wait()) > 0:
            await self.pause(wait)
        self.refresh_credit = self._credit() - 1
        self.refreshed_at = self.clock()

    def refresh_over(self) -> None:
        """A refresh ended: the pause before the next counts from now."""
        now = self.clock()
        self.refresh_took = 0.0 if self.refreshed_at is None else now - self.refreshed_at
        self.refreshed_at = now

    def _keep(self, tools: list[Any], room: int) -> _Page:
        """What fim offers of one page of a listing (SDK `Tool`s), at most `room`
        characters. Runs in a thread: dumping, checking and masking a listing of thousands
        of tools took the event loop seconds."""
        page = _Page()
        infos: list[ToolInfo] = []
        for tool in tools:
            execution = getattr(tool, "execution", None)
            if getattr(execution, "task_support", None) == "required":
                # fim does not run MCP tasks (tasks/get, tasks/result polling); offering
                # the tool would only produce failing calls.
                log.info(
                    "MCP server '%s': tool %s requires task-augmented execution, "
                    "which fim does not support; not offered",
                    self.name,
                    self._shown(tool.name),
                )
                continue
            if not conforming(tool.name):
                page.misnamed.append(tool.name)
                continue
            # sent with every model call in legacy mode, shown by `discover`: a server's
            # bloated schema would be paid for on every turn, and kept for the connection
            for which, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
                size = len(json.dumps(schema or {}, default=str))
                if size > MAX_SCHEMA_CHARS:
                    log.warning(
                        "MCP server '%s': tool '%s' is not offered: its %s schema has "
                        "%d characters (at most %d)",
                        self.name,
                        self.mask(tool.name),  # a server's text: a secret in its env may be in it
                        which,
                        size,
                        MAX_SCHEMA_CHARS,
                    )
                    break
            else:
                infos.append(tool_info(tool))
        for info in self._offered(infos):
            info = masked(info, self.mask)  # masked, then cut: no secret is cut in two
            info = replace(
                info,
                description=_cut(info.description, MAX_DESCRIPTION_CHARS),
                title=_cut(info.title, MAX_TITLE_CHARS) if info.title else info.title,
            )
            schema = json.dumps(info.input_schema, default=str)
            problem = self._schema_problem(schema, info)
            if problem is not None:
                # legacy mode sends every schema with every model call, and providers
                # refuse a request with one that is not a JSON Schema: every run would fail
                log.warning(
                    "MCP server '%s': tool '%s' is not offered: its input schema cannot be "
                    "used: %s",
                    self.name,
                    info.name,
                    problem[:300],
                )
                continue
            size = len(schema) + len(
                json.dumps([info.name, info.description, info.title, info.output_schema])
            )
            if page.size + size > room:
                page.full = True
                break
            page.size += size
            page.kept.append(info)
        return page

    def _schema_problem(self, text: str, info: ToolInfo) -> str | None:
        """`schema_problem` of the schema a model is given (`info.parameters`), remembered
        by the schema's JSON: a refresh checks only the schemas that changed."""
        if text not in self._checked:
            if len(self._checked) >= MAX_CHECKED:
                self._checked.clear()
            try:
                self._checked[text] = schema_problem(info.parameters)
            except RecursionError:  # jsonschema recurses: ~50 levels of `properties`
                self._checked[text] = "it is nested too deeply to be checked"
        return self._checked[text]

    async def _fetch_tools(self, client: Any) -> None:
        tools: list[ToolInfo] = []
        misnamed: list[str] = []
        room = MAX_LIST_CHARS
        cursor: str | None = None
        for _page in range(MAX_TOOL_PAGES):
            listing = await client.list_tools(cursor=cursor)
            page = await in_thread(self.budget, self._keep, listing.tools, room)
            tools += page.kept
            misnamed += page.misnamed
            room -= page.size
            cursor = listing.next_cursor
            if page.full:
                log.warning(
                    "MCP server '%s': its tools hold more than %d characters in all: only the "
                    "first %d are offered",
                    self.name,
                    MAX_LIST_CHARS,
                    len(tools),
                )
                break
            if len(tools) > MAX_TOOLS or (len(tools) == MAX_TOOLS and cursor):
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
        self._warn_misnamed(misnamed)
        self.tools = tools
        self.from_cache = False
        if self.server_version:  # the session has just set it from the server's serverInfo
            self.server_version = self.mask(str(self.server_version))
        caps = getattr(client, "server_capabilities", None)
        # a capability says only that it may list them (FastMCP declares both for every
        # server): whether it has any is what an agent's prompt says (newcomer-54 #15)
        self.has_resources = getattr(caps, "resources", None) is not None and await _lists_any(
            (client.list_resources, "resources"),
            (client.list_resource_templates, "resource_templates"),
        )
        self.has_prompts = getattr(caps, "prompts", None) is not None and await _lists_any(
            (client.list_prompts, "prompts")
        )
        async with self._tools_changed:
            self.tools_version += 1
            self._tools_changed.notify_all()


async def _lists_any(*listings: tuple[Any, str]) -> bool:
    """Whether one of a server's listings (its list call, the field of the answer holding
    the items) has an item; one that fails or takes over `PROBE_SECONDS` counts as one that
    has (the capability said so)."""
    for call, items in listings:
        try:
            async with asyncio.timeout(PROBE_SECONDS):
                answer = await call()
        except Exception:  # a server's answer: its own error, a shape the SDK refused
            return True
        if getattr(answer, items, None):
            return True
    return False
