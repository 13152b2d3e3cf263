"""What one MCP server connection holds: its declaration, its state, what the server told
about itself, and the locks, queue and task handles the other layers share.

`ServerConnection` is one object built in layers (see `fim.mcp.connection`); this is the
bottom one: it creates the state and does no I/O.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fim.config.schema import McpServer, StdioServer
from fim.mcp.deadline import Clock
from fim.mcp.info import ToolInfo, declaration_key
from fim.mcp.pacing import ReadBudget

if TYPE_CHECKING:
    from fim.mcp.jobs import Job
    from fim.mcp.transport import StderrLog

State = Literal["stopped", "starting", "ready", "failed", "crashed", "closed"]

START_TIMEOUT = 30.0
"""Seconds a server gets to start and answer the handshake and the first tools/list."""


class ConnectionState:
    """The state every layer of a connection shares: created here, changed by the layers
    above (`ServerConnection` is the whole)."""

    def __init__(
        self,
        name: str,
        decl: McpServer,
        root: Path,
        *,
        mask: Callable[[str], str] = lambda text: text,
    ) -> None:
        self.name = name
        self.decl = decl
        self.root = root
        self.key = declaration_key(decl, root)
        self.mask = mask
        self.state: State = "stopped"
        self.error: str | None = None
        self.tools: list[ToolInfo] = []
        self.tools_version = 0
        self._listed: dict[str, ToolInfo] = {}
        self._listed_from: list[ToolInfo] | None = None
        """`tools` by name, and the list it was made from (`ToolList.listed`)."""
        self.server_name: str | None = None
        self.failures = 0
        self.starts = 0
        self.start_timeout = START_TIMEOUT
        self._retry_at = 0.0
        self._lock = asyncio.Lock()
        self._tools_changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: Any = None
        self._scope: Any = None
        self._stderr: Any = None
        self._lost = False
        self.refresh_queued = False
        """A tool-list refresh waits to run: another change notice adds nothing to it."""
        self.refreshing = asyncio.Lock()
        """One refresh at a time (a server may send change notices without end)."""
        self.asking = False
        """A question of the server's waits for its user's answer (`fim.mcp.elicitation`:
        one at a time)."""
        self.cut: str | None = None
        """Why the HTTP client stopped reading an answer (`fim.mcp.capped`): the calls the
        connection's end fails are told that, not that the server stopped."""
        self.cut_upto = 0
        """The newest request in flight when `cut` was set: a request sent after it failing
        is not told that old reason (an SSE stream resumed after a refusal sets it again)."""
        self.has_resources = False
        self.has_prompts = False
        self.server_version: str | None = None
        self.from_cache = False
        """`tools` came from the tool-list cache (fim/mcp/cache.py); the server has not
        answered yet in this process."""
        self.clock: Clock = time.monotonic
        """The clock of call deadlines and of the pause between tool-list refreshes (tests
        inject one)."""
        self.pause: Callable[[float], Awaitable[None]] = asyncio.sleep
        """How a refresh waits out its pause (`fim.mcp.tool_list.REFRESH_SECONDS`; tests
        inject one that moves their clock instead of sleeping)."""
        self.refresh_credit = 0.0
        """Refreshes that may run now (`ToolList.refresh_wait`); set at the first."""
        self.refreshed_at: float | None = None
        """When the last refresh started, then ended, on `clock` (None: none ran yet)."""
        self.refresh_took = 0.0
        """Seconds the last refresh took, on `clock`."""
        self.crashes: list[float] = []
        """When the session crashed within the last `fim.mcp.session.CRASH_WINDOW`, on
        `clock`."""
        self.budget = ReadBudget()
        """How fast what the server sends is read: the server's, shared with every
        connection of it (`McpManager` sets it: each key's and each restart's)."""
        self._checked: dict[str, str | None] = {}
        """What `fim.schema_check.schema_problem` said of each input schema listed (by its
        JSON): a refresh checks only what changed."""
        self._inflight: set[Job] = set()
        """Requests sent and not yet answered: a server's elicitation or sampling request
        is its run's (`fim.mcp.caller.asking_run`)."""

    @property
    def transport(self) -> str:
        if isinstance(self.decl, StdioServer):
            return "stdio"
        return self.decl.transport

    @property
    def description(self) -> str:
        return self.decl.description or self.server_name or self.name

    def stderr_tail(self) -> str:
        return self.mask(self._stderr.tail()) if self._stderr is not None else ""

    def stderr_log(self) -> StderrLog | None:
        """The running stdio server's captured stderr (`fim.mcp.call_stderr`), or None."""
        log: StderrLog | None = self._stderr
        return log
