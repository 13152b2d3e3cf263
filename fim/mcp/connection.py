"""One MCP server's lifecycle: lazy start, shared session, cached tools, crash recovery.

Each live session is owned by one long-running asyncio task. The SDK's transports and
`Client` are anyio context managers whose cancel scopes must be entered and exited by the
same task, so callers never touch them: they put a `_Job` on the owner's queue and await
its future. The owner runs each job in a child task, so calls from many runs proceed
concurrently over one session.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from fim.config.schema import McpServer, StdioServer
from fim.mcp.cache import cache_key, load, store
from fim.mcp.deadline import CallDeadline, Clock
from fim.mcp.elicitation import elicitation_callback
from fim.mcp.errors import (
    McpCallTimeout,
    McpRequestError,
    McpServerLost,
    McpUnavailable,
    NotSent,
    describe_exception,
)
from fim.mcp.info import ToolInfo, declaration_key, tool_info
from fim.mcp.sampling import sampling_callback
from fim.mcp.transport import StderrLog, import_sdk, open_client

log = logging.getLogger(__name__)

State = Literal["stopped", "starting", "ready", "failed", "crashed", "closed"]

START_TIMEOUT = 30.0
"""Seconds a server gets to start and answer the handshake and the first tools/list."""
MAX_BACKOFF = 30.0
WAIT_FOR_BACKOFF = 2.0
"""A call waits out a restart delay up to this long; beyond it the call fails fast."""
CLOSE_GRACE = 5.0
MAX_TOOL_PAGES = 50


ProgressFn = Callable[[float, float | None, str | None], None]
"""Called with (progress, total, message) for each progress notification of a call."""


_SEQ = itertools.count()


@dataclass(eq=False)
class _Job:
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

    def cancel(self) -> None:
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()
        if not self.future.done():
            self.future.cancel()


class ServerConnection:
    """A declared MCP server as seen by fim: started on first use, shared by every run."""

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
        self.has_resources = False
        self.has_prompts = False
        self.sampling_model: Callable[[], Any] | None = None
        """Builds the model that answers the server's sampling requests (set by the run
        that uses the server: its project's `fast` model); None refuses them."""
        self.server_version: str | None = None
        self.from_cache = False
        """`tools` came from the tool-list cache (fim/mcp/cache.py); the server has not
        answered yet in this process."""
        self.clock: Clock = time.monotonic
        """The clock of call deadlines (tests inject one)."""
        self._inflight: set[_Job] = set()
        """Requests sent and not yet answered: an elicitation is routed to their run."""

    # ------------------------------------------------------------------ public API

    @property
    def transport(self) -> str:
        if isinstance(self.decl, StdioServer):
            return "stdio"
        return self.decl.transport

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
        self.tools = listing["tools"]
        self.server_name = listing["server_name"]
        self.server_version = listing["server_version"]
        self.has_resources = listing["has_resources"]
        self.has_prompts = listing["has_prompts"]
        self.from_cache = True
        return True

    @property
    def description(self) -> str:
        return self.decl.description or self.server_name or self.name

    async def start(self, *, wait: bool = True) -> None:
        """Make sure the server runs; raise `McpUnavailable` with the reason if it cannot.

        After a failure, restarts back off; `wait=False` fails at once while a restart is
        not due yet (building a run's prompt should not stall on a broken server).
        """
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            raise McpUnavailable(
                "this MCP session was started on another event loop; keep one Services "
                "(and so one McpManager) per event loop"
            )
        if self.state == "ready":
            return
        async with self._lock:
            if self.state == "ready":
                return
            if self.state == "closed":
                raise McpUnavailable(self.error or "the server was shut down")
            await self._join_owner()  # a crashed session finishes unwinding first
            delay = self._retry_at - time.monotonic()
            if delay > (WAIT_FOR_BACKOFF if wait else 0):
                raise McpUnavailable(f"{self.error}; next restart attempt in {delay:.1f}s")
            if delay > 0:
                await asyncio.sleep(delay)
            await self._launch()

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

    def inflight(self) -> list[_Job]:
        """The requests sent and not answered yet, oldest first."""
        return sorted(self._inflight, key=lambda job: job.seq)

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float | None = None,
        *,
        on_progress: ProgressFn | None = None,
        caller: Any = None,
    ) -> Any:
        """Call a tool and return the SDK's `CallToolResult`.

        Raises `McpUnavailable`, `McpCallTimeout`, `McpServerLost` or `McpRequestError`.
        A request that never left (the connection died while idle) is retried once after a
        restart; one that was in flight is not, since the tool may have acted. Each
        progress notification restarts the timeout and is passed to `on_progress`.
        """
        limit = timeout if timeout is not None else self.timeout_for(tool)
        for _attempt in range(2):
            await self.start()
            future = asyncio.get_running_loop().create_future()
            job = _Job(
                "call", future, tool, arguments, limit, on_progress=on_progress, caller=caller
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
            job = _Job("request", future, timeout=limit, request=make, caller=caller)
            try:
                return await self._submit(job, limit)
            except NotSent:
                continue
        raise McpUnavailable(self.error or "the server keeps closing the connection")

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

    async def aclose(self) -> None:
        """Stop the server (for stdio: close stdin, then terminate its process tree).

        Does not take the start lock: closing must not wait for a hanging handshake.
        """
        self.state = "closed"
        await self._stop_owner()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def stderr_tail(self) -> str:
        return self.mask(self._stderr.tail()) if self._stderr is not None else ""

    # ------------------------------------------------------------------ caller side

    async def _submit(self, job: _Job, limit: float) -> Any:
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

    # ------------------------------------------------------------------ owner side

    async def _launch(self) -> None:
        await import_sdk()  # ~0.5 s of imports, off the event loop
        if self.state == "closed":
            raise McpUnavailable(self.error or "the server was shut down")

        if self._stderr is not None:
            self._stderr.close()
        self._stderr = StderrLog() if isinstance(self.decl, StdioServer) else None
        self.state = "starting"
        self.starts += 1
        self._lost = False
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._own(ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
        except TimeoutError:
            await self._stop_owner()
            hang = TimeoutError(f"no answer to the MCP handshake within {self.start_timeout:g}s")
            self._failed("failed", self._start_failure(hang))
            raise McpUnavailable(self.error or "timed out") from None
        except asyncio.CancelledError:
            if not ready.done():
                await self._stop_owner()
                if self.state != "closed":
                    self.state = "stopped"
            raise
        except Exception as exc:
            await self._join_owner()
            self._failed("failed", self._start_failure(exc))
            raise McpUnavailable(self.error or "failed to start") from None

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """The owner task: holds the session's context managers from entry to exit."""

        serving = False
        failure: Exception | None = None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with AsyncExitStack() as stack:
                    # No fail_after here: the contexts entered now are exited at the end
                    # of the session, outside such a scope. `_launch` enforces the limit.
                    client = await open_client(
                        stack,
                        self.decl,
                        self.root,
                        stderr=self._stderr,
                        on_message=self._on_message,
                        on_end=self._on_end,
                        sampling=sampling_callback(self.name, lambda: self.sampling_model),
                        elicitation=elicitation_callback(self),
                    )
                    info = client.server_info
                    self.server_name = getattr(info, "title", None) or getattr(info, "name", None)
                    self.server_version = getattr(info, "version", None)
                    await self._fetch_tools(client)
                    await self._remember_tools()
                    send, receive = anyio.create_memory_object_stream[_Job](math.inf)
                    self._jobs = send
                    self.state = "ready"
                    self.error = None
                    serving = True
                    ready.set_result(None)
                    async with anyio.create_task_group() as tg, receive:
                        try:
                            async for job in receive:
                                tg.start_soon(self._run_job, client, job)
                        finally:
                            self._session_over()
                        tg.cancel_scope.cancel()
        except Exception as exc:
            failure = exc
            _fail(ready, exc)
        finally:
            _fail(ready, McpUnavailable("the server was stopped while starting"))
            self._session_over()
            self._scope = None
            if serving and self.state != "closed":
                if self._lost or failure is None:
                    why = "the server closed the connection"
                else:
                    why = f"the connection failed: {describe_exception(failure)}"
                tail = self.stderr_tail()
                self._failed("crashed", self.mask(why) + (f" (stderr: {tail})" if tail else ""))

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

    def _session_over(self) -> None:
        """No more jobs: new calls must start a new session (right away, not only once
        this one has finished unwinding)."""
        if self._jobs is not None:
            self._jobs.close()
        self._jobs = None
        if self.state == "ready":
            self.state = "crashed"

    async def _run_job(self, client: Any, job: _Job) -> None:
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
                job.sent = True
                self._inflight.add(job)
                result: Any = None
                if job.kind == "refresh":
                    await self._fetch_tools(client)
                elif job.kind == "request":
                    assert job.request is not None
                    result = await job.request(client)
                else:
                    result = await client.call_tool(
                        job.tool, job.arguments, progress_callback=self._progress_of(job)
                    )
            if not job.future.done():
                job.future.set_result(result)
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                self._settle(job, McpCallTimeout(f"no answer within {job.timeout:g}s"))
            elif exc.code == mcp_types.CONNECTION_CLOSED:
                self._settle(job, self._lost_error(job))
            else:
                self._settle(job, McpRequestError(exc.error.message or str(exc)))
        except NotSent as exc:
            self._settle(job, exc)
        except Exception as exc:
            self._settle(job, McpRequestError(describe_exception(exc)))
        finally:
            self._inflight.discard(job)
            if not job.future.done():
                closed = self.state == "closed"
                gone = McpUnavailable("the server was shut down") if closed else None
                self._settle(job, gone or self._lost_error(job))

    def _progress_of(self, job: _Job) -> Callable[[float, float | None, str | None], Any]:
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

    def _settle(self, job: _Job, exc: Exception) -> None:
        _fail(job.future, exc)

    def _lost_error(self, job: _Job) -> Exception:
        if not job.sent:
            return NotSent()
        tail = self.stderr_tail()
        return McpServerLost(
            "the server closed the connection during the call"
            + (f" (stderr: {tail})" if tail else "")
        )

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
                tools.append(tool_info(tool))
            cursor = listing.next_cursor
            if not cursor:
                break
        self.tools = tools
        self.from_cache = False
        caps = getattr(client, "server_capabilities", None)
        self.has_resources = getattr(caps, "resources", None) is not None
        self.has_prompts = getattr(caps, "prompts", None) is not None
        async with self._tools_changed:
            self.tools_version += 1
            self._tools_changed.notify_all()

    async def _on_message(self, message: Any) -> None:
        """Session notifications; runs inside the SDK's receive loop, so no I/O here."""
        # deferred: loading mcp_types costs hundreds of ms
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification) and self._jobs is not None:
            future = asyncio.get_running_loop().create_future()
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._jobs.send_nowait(_Job("refresh", future))

    def _on_end(self) -> None:
        """The transport's read side ended: stop accepting jobs so the owner unwinds."""
        if self.state != "ready" or self._lost:
            return
        self._lost = True
        if self._jobs is not None:
            self._jobs.close()
        self._session_over()

    async def _stop_owner(self) -> None:
        task = self._task
        if task is None:
            return
        if self._jobs is not None:
            self._jobs.close()
        elif self._scope is not None:
            self._scope.cancel()
        else:
            task.cancel()  # not started yet, so it holds no context to unwind
        done, _ = await asyncio.wait({task}, timeout=CLOSE_GRACE)
        if not done and self._scope is not None:
            self._scope.cancel()
            done, _ = await asyncio.wait({task}, timeout=CLOSE_GRACE)
        if not done:
            task.cancel()
        await self._join_owner()

    async def _join_owner(self) -> None:
        """Wait until the owner task has finished. `asyncio.wait`, not `await task`: a
        cancelled waiter must not cancel the owner in the middle of its shutdown."""
        task = self._task
        if task is None:
            return
        await asyncio.wait({task})
        if self._task is task:
            self._task = None
        if not task.cancelled():
            task.exception()  # reported through the ready future already

    def _start_failure(self, exc: BaseException) -> str:
        reason = describe_exception(exc)
        if isinstance(self.decl, StdioServer):
            command = " ".join([self.decl.command, *self.decl.args])
            tail = self.stderr_tail()
            if "Connection closed" in reason:
                reason = "the process exited before completing the MCP handshake"
            reason += (f" (stderr: {tail})" if tail else "") + f" [command: {command}]"
        else:
            reason = f"{self.decl.url}: {reason}"
        return self.mask(reason)

    def _failed(self, state: State, reason: str) -> None:
        if self.state == "closed":
            return
        self.state = state
        self.error = reason
        self.failures += 1
        delay = 0.0 if self.failures == 1 else min(MAX_BACKOFF, 0.5 * 2 ** (self.failures - 2))
        self._retry_at = time.monotonic() + delay


def _fail(future: asyncio.Future[Any], exc: Exception) -> None:
    """Settle a future with an error unless it is settled, marking the error retrieved: the
    waiter may already be gone (timed out, cancelled) and asyncio would log it otherwise."""
    if not future.done():
        future.set_exception(exc)
        future.exception()
