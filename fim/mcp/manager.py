"""McpManager: every MCP server connection of one process, shared by all runs.

It lives in `fim.run.services.Services` (one per CLI command or server process) so a server is
started once and reused by every run that needs it, and a reload keeps servers whose
declaration did not change. This module imports nothing heavy: the SDK is loaded only
when a connection actually starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fim.config.schema import McpServer
from fim.mcp.connection import ServerConnection
from fim.mcp.errors import McpUnavailable
from fim.mcp.info import ToolInfo, declaration_key
from fim.mcp.pacing import ReadBudget, ServerBudget

SERVICE_KEY = "mcp"


@dataclass(frozen=True)
class ServerStatus:
    """A row of `fim mcp list`."""

    name: str
    transport: str
    state: str
    tools: int
    detail: str


MAX_KEYED = 16
"""Connections of one `scope: key` server at once (one per key); past it the least
recently used is stopped (its key's next call starts it again)."""
MAX_READERS = 4096
"""Slots (keys' connections) whose reading of their server's budget is remembered."""
KEYED_IDLE = 900.0
"""Seconds a key's connection may go unused before the next key's call stops it (a
browser a tenant left holds its memory otherwise)."""


class McpManager:
    """Connections by server name, each bound to the declaration it was made from; a
    `scope: key` server has one per key (slot `name` + NUL + key hash)."""

    def __init__(self, root: Path | None = None, clock: Callable[[], float] = time.monotonic):
        self.root = root
        self.clock = clock
        self._connections: dict[str, ServerConnection] = {}
        self._used: dict[str, float] = {}
        """A key's connection (its slot) -> when a run last asked for it."""
        self._budgets: dict[str, ServerBudget] = {}
        self._readers: dict[str, ReadBudget] = {}
        """Each slot's `ReadBudget`, the most recently used last (`MAX_READERS` kept)."""
        """How fast each server is read, by server name: kept across its keys'
        connections, evictions, restarts and reloads (`fim.mcp.pacing`)."""
        self._retiring: set[asyncio.Task[None]] = set()
        self._starting: set[asyncio.Task[None]] = set()

    def connection(
        self,
        name: str,
        decl: McpServer,
        root: Path,
        *,
        mask: Callable[[str], str] = lambda text: text,
        owner: str = "",
    ) -> ServerConnection:
        """The connection for this exact declaration (created lazily, never started here):
        the key `owner`'s own when the server is `scope: key`.

        A different declaration under the same name (a reload changed it) replaces the old
        connection, which is stopped in the background.
        """
        slot = f"{name}\0{owner}" if owner and decl.scope == "key" else name
        current = self._connections.get(slot)
        if current is None or current.key != declaration_key(decl, root):
            if current is not None:
                self._retire(self._connections.pop(slot))
            current = self._connections[slot] = ServerConnection(name, decl, root, mask=mask)
            current.budget = self._reader(slot, name)
        if slot != name:
            self._used[slot] = self.clock()
            self._keep_keyed(slot)
        return current

    def _reader(self, slot: str, name: str) -> ReadBudget:
        """The slot's reading of its server's budget, kept past the slot's evictions and
        restarts: what a key's connection owed goes on with the key (a new connection
        started debt-free, so keys taken in turn past `MAX_KEYED` held the loop 70-80% of
        the time: attack-41 #0)."""
        found = self._readers.pop(slot, None)
        if found is None:  # a new key of a server in debt waits its share of that debt first
            found = ReadBudget(self._budgets.setdefault(name, ServerBudget()))
            found.inherit()
        self._readers[slot] = found  # newest last
        while len(self._readers) > MAX_READERS:
            del self._readers[next(iter(self._readers))]
        return found

    def _keep_keyed(self, asking: str) -> None:
        """Stop the keys' connections (of every `scope: key` server) unused for
        `KEYED_IDLE`, and the least recently used of `asking`'s server past `MAX_KEYED`."""
        now, server = self.clock(), asking.partition("\0")[0]
        keyed = sorted(
            (used, slot) for slot, used in self._used.items() if slot in self._connections
        )
        same = [slot for _, slot in keyed if slot.startswith(f"{server}\0")]
        stale = {slot for used, slot in keyed if now - used > KEYED_IDLE}
        stale.update(same[: max(0, len(same) - MAX_KEYED)])
        for slot in stale - {asking}:
            self._retire(self._connections.pop(slot))
            del self._used[slot]

    def get(self, name: str) -> ServerConnection | None:
        return self._connections.get(name)

    async def sync(
        self,
        servers: Mapping[str, McpServer],
        root: Path | None = None,
        *,
        mask: Callable[[str], str] = lambda text: text,
    ) -> dict[str, list[str]]:
        """Bring the connections in line with a (reloaded) `mcp_servers:` declaration.

        Unchanged servers keep running; changed ones are stopped and, if they were running,
        started again with the new declaration; removed ones are stopped. Returns the names
        in each group, for the reload log.
        """
        base = root or self.root or Path.cwd()
        report: dict[str, list[str]] = {"kept": [], "restarted": [], "added": [], "stopped": []}
        for slot in list(self._connections):
            name, _, owner = slot.partition("\0")
            if not owner:
                if name not in servers:
                    self._retire(self._connections.pop(slot))
                    report["stopped"].append(name)
                continue
            decl = servers.get(name)
            if decl is None or self._connections[slot].key != declaration_key(decl, base):
                self._retire(self._connections.pop(slot))  # a key's next call starts it again
                self._used.pop(slot, None)
        restart: list[ServerConnection] = []
        for name, decl in servers.items():
            old = self._connections.get(name)
            if decl.scope == "key" and old is None:
                continue  # started per key, on first use
            if old is not None and old.key == declaration_key(decl, base):
                report["kept"].append(name)
                continue
            was_running = old is not None and old.state == "ready"
            conn = self.connection(name, decl, base, mask=mask)
            if old is None:
                report["added"].append(name)
            else:
                report["restarted"].append(name)
                if was_running:
                    restart.append(conn)
        await self.drain()
        results = await asyncio.gather(*(c.start() for c in restart), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, McpUnavailable):
                raise result
        return report

    async def start_all(self, conns: list[ServerConnection] | None = None) -> None:
        """Start these connections (every known one by default) concurrently; failures are
        kept on each connection's `state`/`error` rather than raised."""
        chosen = list(self._connections.values()) if conns is None else conns
        await asyncio.gather(*(_quiet_start(c) for c in chosen))

    def start_soon(self, conns: list[ServerConnection]) -> None:
        """Start these servers in the background (their tools are known from the cache):
        the run goes on to its first model call meanwhile."""
        loop = asyncio.get_running_loop()
        for conn in conns:
            task = loop.create_task(_quiet_start(conn), name=f"mcp-start:{conn.name}")
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    def status(self) -> list[ServerStatus]:
        rows = []
        for slot, conn in self._connections.items():
            detail = conn.error or (conn.description if conn.state == "ready" else "")
            name, _, owner = slot.partition("\0")
            if owner:
                name = f"{name} (key {owner[:8]})"
            rows.append(ServerStatus(name, conn.transport, conn.state, len(conn.tools), detail))
        return rows

    async def drain(self) -> None:
        """Wait until retired connections have stopped."""
        if self._retiring:
            await asyncio.gather(*list(self._retiring), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop every server; stdio processes are gone when this returns."""
        connections = list(self._connections.values())
        self._connections.clear()
        self._used.clear()
        await asyncio.gather(*(c.aclose() for c in connections), return_exceptions=True)
        starting = list(self._starting)
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)
        await self.drain()

    def _retire(self, conn: ServerConnection) -> None:
        conn.error = "its declaration changed (reload); runs started since then use the new one"
        task = asyncio.get_running_loop().create_task(conn.aclose(), name=f"mcp-retire:{conn.name}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)


async def _quiet_start(conn: ServerConnection) -> None:
    with contextlib.suppress(McpUnavailable):  # kept on the connection: state and error
        await conn.start(wait=False)


def get_manager(services: Any) -> McpManager:
    """The process-wide manager kept in `Services`, closed with it."""

    def make() -> McpManager:
        root = getattr(services, "root", None)
        return McpManager(Path(root) if root is not None else None)

    return services.get(SERVICE_KEY, make, closer=lambda manager: manager.aclose())


async def check_live(snapshot: Any) -> list[tuple[str, bool, str]]:
    """Connect to every declared server (for `fim validate --live`): name, ok, detail.

    A failure's detail says why, with the server's stderr for stdio servers. Every server
    is stopped again before this returns.
    """
    manager = McpManager(snapshot.root)
    try:
        for name, decl in snapshot.project.mcp_servers.items():
            manager.connection(name, decl, snapshot.root, mask=snapshot.mask)
        await manager.start_all()
        results = []
        for name in snapshot.project.mcp_servers:
            conn = manager.get(name)
            assert conn is not None
            if conn.state == "ready":
                results.append((name, True, f"{len(conn.tools)} tools"))
            else:
                results.append((name, False, conn.error or conn.state))
        return results
    finally:
        await manager.aclose()


__all__ = [
    "McpManager",
    "McpUnavailable",
    "ServerConnection",
    "ServerStatus",
    "ToolInfo",
    "check_live",
    "get_manager",
]
