"""One request's trip over an MCP session: a caller queues a `Job` and waits under its
deadline; the owner task runs it in a child task and settles it with the right error.

Its own module because the rules of a request (idle and total timeouts, progress pushing
the deadline, which failures may be retried because the request never left) are one
concern, used by every call, resource read and tool-list refresh.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from fim.mcp.deadline import CallDeadline
from fim.mcp.errors import (
    McpCallTimeout,
    McpRequestError,
    McpResultRejected,
    McpServerLost,
    McpUnavailable,
    NotSent,
    bounded,
    describe_exception,
)
from fim.mcp.tool_list import ToolList

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, float | None, str | None], None]
"""Called with (progress, total, message) for each progress notification of a call."""


_SEQ = itertools.count()


@dataclass(eq=False)
class Job:
    kind: Literal["call", "refresh", "request"]
    future: asyncio.Future[Any]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    sent: bool = False
    cancelled: bool = False
    scope: Any = None
    request: Callable[[Any], Awaitable[Any]] | None = None
    """For `request` jobs: the SDK call to make with the entered `Client`."""
    on_progress: ProgressFn | None = None
    deadline: CallDeadline | None = None
    """Idle timeout (reset by progress, paused while a human answers an elicitation)
    under a hard maximum."""
    seq: int = field(default_factory=lambda: next(_SEQ))
    caller: Any = None
    """The run this request works for (`fim.mcp.caller.Caller`): where its events go and
    whether a human can answer the server's questions. None for fim's own requests."""
    meta: dict[str, Any] | None = None
    """For `call` jobs: the request's `_meta` (fim.mcp.calls.request_meta)."""

    def cancel(self) -> None:
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()
        if not self.future.done():
            self.future.cancel()


class Requests(ToolList):
    """Requests over the session: queued by callers, run by the owner task."""

    def timeout_for(self, tool: str | None = None) -> float:
        """Seconds without an answer or progress after which a call is cancelled: the
        tool's entry in `tool_timeouts`, else the server's `timeout`."""
        per_tool = getattr(self.decl, "tool_timeouts", {}) or {}
        if tool is not None and tool in per_tool:
            return float(per_tool[tool])
        return float(self.decl.timeout)

    def max_timeout(self) -> float:
        """Seconds a call may take in all, however much progress it reports."""
        return float(getattr(self.decl, "max_timeout", 0) or 0) or math.inf

    def inflight(self) -> list[Job]:
        """The requests sent and not answered yet, oldest first."""
        return sorted(self._inflight, key=lambda job: job.seq)

    async def _submit(self, job: Job, limit: float) -> Any:
        if self._jobs is None:
            raise NotSent()
        deadline = job.deadline = CallDeadline(limit, self.max_timeout(), self.clock)
        try:
            self._jobs.send_nowait(job)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.WouldBlock):
            raise NotSent() from None
        try:
            while True:
                left = deadline.remaining()
                if left is not None and left <= 0:
                    job.cancel()
                    raise McpCallTimeout(deadline.expired_reason())
                deadline.changed.clear()
                moved = asyncio.ensure_future(deadline.changed.wait())
                try:
                    done, _ = await asyncio.wait(
                        {job.future, moved},
                        timeout=None if left is None else min(left, 3600.0),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    moved.cancel()
                if job.future in done:
                    return job.future.result()
        except asyncio.CancelledError:
            job.cancel()
            raise

    async def _run_job(self, client: Any, job: Job) -> None:
        # deferred: loading mcp_types costs hundreds of ms
        import mcp_types
        from mcp.shared.exceptions import MCPError

        try:
            with anyio.CancelScope() as scope:
                job.scope = scope
                if job.cancelled or job.future.done():
                    return
                if self._lost:
                    raise NotSent()
                result: Any = None
                if job.kind == "refresh":
                    async with self.refreshing:
                        await self.refresh_turn()  # paced: at most one each REFRESH_SECONDS
                        job.sent = True
                        self._inflight.add(job)
                        self.refresh_queued = False  # a notice from now on: one more
                        try:
                            await self._fetch_tools(client)
                        finally:
                            self.refresh_over()
                elif job.kind == "request":
                    assert job.request is not None
                    job.sent = True
                    self._inflight.add(job)
                    result = await job.request(client)
                else:
                    job.sent = True
                    self._inflight.add(job)
                    result = await client.call_tool(
                        job.tool,
                        job.arguments,
                        progress_callback=self._progress_of(job),
                        meta=job.meta,
                    )
            if not job.future.done():
                job.future.set_result(result)
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                self._settle(job, McpCallTimeout(f"no answer within {job.timeout:g}s"))
            elif exc.code == mcp_types.CONNECTION_CLOSED:
                self._settle(job, self._lost_error(job))
            elif exc.code == mcp_types.PARSE_ERROR and self._cut_for(job) is not None:
                # the SDK's word for a JSON answer fim stopped reading (fim.mcp.capped)
                self._settle(job, McpResultRejected(self._cut_for(job) or ""))
                self.cut = None
            else:
                self._settle(job, McpRequestError(bounded(exc.error.message or str(exc))))
        except (NotSent, McpResultRejected) as exc:
            self._settle(job, exc)
        except Exception as exc:
            self._settle(job, McpRequestError(describe_exception(exc)))
        finally:
            self._inflight.discard(job)
            if not job.future.done():
                closed = self.state == "closed"
                gone = McpUnavailable("the server was shut down") if closed else None
                self._settle(job, gone or self._lost_error(job))

    def _progress_of(self, job: Job) -> Callable[[float, float | None, str | None], Any]:
        """The SDK's progress callback for one call: pushes the deadline and reports."""

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if job.deadline is not None:
                job.deadline.touch()
            if job.on_progress is not None:
                try:
                    job.on_progress(value, total, self.mask(message) if message else None)
                except Exception:  # a reporting bug must not break the call
                    log.exception("MCP progress callback failed")

        return progress

    def _settle(self, job: Job, exc: Exception) -> None:
        fail(job.future, exc)

    def _cut_for(self, job: Job) -> str | None:
        """Why fim stopped reading an answer, if `job` was in flight then."""
        return self.cut if self.cut is not None and job.seq <= self.cut_upto else None

    def _lost_error(self, job: Job) -> Exception:
        if not job.sent:
            return NotSent()
        cut = self._cut_for(job)
        if cut is not None:
            return McpResultRejected(f"{cut}; the connection is opened again")
        tail = self.stderr_tail()
        return McpServerLost(
            "the server closed the connection during the call"
            + (f" (stderr: {tail})" if tail else "")
        )


def fail(future: asyncio.Future[Any], exc: Exception) -> None:
    """Settle a future with an error unless it is settled, marking the error retrieved: the
    waiter may already be gone (timed out, cancelled) and asyncio would log it otherwise."""
    if not future.done():
        future.set_exception(exc)
        future.exception()
