"""One MCP server as fim sees it: started on first use, shared by every run, restarted
after a crash.

`ServerConnection` is built in layers, one module each: `state` (what a connection holds),
`tool_list` (fetched, cached, change notices), `jobs` (one request's trip between a caller
and the session's owner task), `session` (start, the owner task, crash recovery,
shutdown). This module adds the public calls and their rule: a request that never left is
retried once after a restart; one that was in flight is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fim.mcp.errors import McpUnavailable, NotSent
from fim.mcp.jobs import Job, ProgressFn
from fim.mcp.session import Session


class ServerConnection(Session):
    """A declared MCP server as seen by fim: started on first use, shared by every run."""

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float | None = None,
        *,
        on_progress: ProgressFn | None = None,
        caller: Any = None,
        meta: dict[str, Any] | None = None,
    ) -> Any:
        """Call a tool and return the SDK's `CallToolResult`; `meta` goes in the request's
        `_meta` (next to the SDK's progress token).

        Raises `McpUnavailable`, `McpCallTimeout`, `McpServerLost` or `McpRequestError`.
        A request that never left (the connection died while idle) is retried once after a
        restart; one that was in flight is not, since the tool may have acted. Each
        progress notification restarts the timeout and is passed to `on_progress`.
        """
        limit = timeout if timeout is not None else self.timeout_for(tool)
        for _attempt in range(2):
            await self.start()
            future = asyncio.get_running_loop().create_future()
            job = Job(
                "call",
                future,
                tool,
                arguments,
                limit,
                on_progress=on_progress,
                caller=caller,
                meta=meta,
            )
            try:
                result = await self._submit(job, limit)
            except NotSent:
                continue
            self.failures = 0
            return result
        raise McpUnavailable(self.error or "the server keeps closing the connection")

    async def request(
        self,
        make: Callable[[Any], Awaitable[Any]],
        timeout: float | None = None,
        *,
        caller: Any = None,
    ) -> Any:
        """Run one other SDK request (`lambda c: c.read_resource(uri)`) on the session,
        with the same errors and restart rules as `call`."""
        limit = timeout if timeout is not None else self.timeout_for()
        for _attempt in range(2):
            await self.start()
            future = asyncio.get_running_loop().create_future()
            job = Job("request", future, timeout=limit, request=make, caller=caller)
            try:
                return await self._submit(job, limit)
            except NotSent:
                continue
        raise McpUnavailable(self.error or "the server keeps closing the connection")
