"""One MCP server's session lifecycle: lazy start, the task that owns the session, crash
recovery with backoff, and shutdown.

Each live session is owned by one long-running asyncio task. The SDK's transports and
`Client` are anyio context managers whose cancel scopes must be entered and exited by the
same task, so callers never touch them: they put a `Job` on the owner's queue and await
its future. The owner runs each job in a child task, so calls from many runs proceed
concurrently over one session.

Its own module because starting, watching and stopping a server (timeouts, backoff,
unwinding the SDK's context managers in the right task) changes for other reasons than
what a request or the tool list is.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from contextlib import AsyncExitStack
from typing import Any

import anyio

from fim.config.schema import StdioServer
from fim.mcp import transport
from fim.mcp.checks import check_results
from fim.mcp.elicitation import elicitation_callback
from fim.mcp.errors import McpUnavailable, describe_exception
from fim.mcp.jobs import Job, Requests, fail
from fim.mcp.sampling import sampling_callback
from fim.mcp.state import State
from fim.mcp.transport import StderrLog, import_sdk, open_client
from fim.startup_cost import one_off

MAX_BACKOFF = 30.0
WAIT_FOR_BACKOFF = 2.0
"""A call waits out a restart delay up to this long; beyond it the call fails fast."""
CLOSE_GRACE = 5.0
CRASH_WINDOW = 60.0
FREE_CRASHES = 5
"""Crashes of a session within `CRASH_WINDOW` seconds that restart at once (a successful
call forgives a failed start, not a crash loop); past them each restart waits 0.5 s more,
doubling to `MAX_BACKOFF`. A server exiting after each answer was restarted, and listed, at
the rate of its calls (attack-36 #2)."""


class Session(Requests):
    """The session of a connection: started on demand, owned by one task, restarted after
    a crash."""

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
        # a call waiting for the server's start (its own, or one a run began in the
        # background): start-up, not the call's time (`fim.startup_cost`, newcomer-54 #5)
        with one_off():
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

    async def aclose(self) -> None:
        """Stop the server (for stdio: close stdin, then terminate its process tree).

        Does not take the start lock: closing must not wait for a hanging handshake.
        """
        self.state = "closed"
        await self._stop_owner()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

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
        self.cut = None
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._own(ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
        except TimeoutError:
            await self._stop_owner()
            paced = (
                " (it sent more than fim parses of one server at once: the rest is read as "
                "a tenth of fim's time allows)"
                if self.budget.owed() > 0
                else ""
            )
            hang = TimeoutError(
                f"no answer to the MCP handshake within {self.start_timeout:g}s{paced}"
            )
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
                        on_cut=self._on_cut,
                        budget=self.budget,
                        sampling=sampling_callback(self),
                        elicitation=elicitation_callback(self),
                    )
                    check_results(client.session, lambda: self.tools, self.name)
                    info = client.server_info
                    named = getattr(info, "title", None) or getattr(info, "name", None)
                    self.server_name = self.mask(named) if named else None
                    self.server_version = getattr(info, "version", None)
                    await self._fetch_tools(client)
                    await self._remember_tools()
                    send, receive = anyio.create_memory_object_stream[Job](math.inf)
                    self._jobs = send
                    self.state = "ready"
                    self.error = None
                    serving = True
                    ready.set_result(None)
                    async with anyio.create_task_group() as tg, receive:
                        if self._stderr is not None:
                            tg.start_soon(self._trim_stderr, self._stderr)
                        try:
                            async for job in receive:
                                tg.start_soon(self._run_job, client, job)
                        finally:
                            self._session_over()
                        tg.cancel_scope.cancel()
        except Exception as exc:
            failure = exc
            fail(ready, exc)
        finally:
            fail(ready, McpUnavailable("the server was stopped while starting"))
            self._session_over()
            self._scope = None
            if serving and self.state != "closed":
                if self._lost or failure is None:
                    why = "the server closed the connection"
                else:
                    why = f"the connection failed: {describe_exception(failure)}"
                tail = self.stderr_tail()
                self._failed("crashed", self.mask(why) + (f" (stderr: {tail})" if tail else ""))

    @staticmethod
    async def _trim_stderr(log: StderrLog) -> None:
        """While the server runs, keep its captured stderr short (ends with the session)."""
        while True:
            await anyio.sleep(transport.STDERR_TRIM_SECONDS)
            log.trim()

    def _session_over(self) -> None:
        """No more jobs: new calls must start a new session (right away, not only once
        this one has finished unwinding)."""
        if self._jobs is not None:
            self._jobs.close()
        self._jobs = None
        if self.state == "ready":
            self.state = "crashed"

    async def _on_message(self, message: Any) -> None:
        """Session notifications; runs inside the SDK's receive loop, so no I/O here."""
        # deferred: loading mcp_types costs hundreds of ms
        import mcp_types

        if (
            isinstance(message, mcp_types.ToolListChangedNotification)
            and self._jobs is not None
            and not self.refresh_queued  # one queued refresh reads every change before it
        ):
            self.refresh_queued = True
            future = asyncio.get_running_loop().create_future()
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._jobs.send_nowait(Job("refresh", future))

    def _on_cut(self, reason: str) -> None:
        self.cut = reason
        self.cut_upto = max((job.seq for job in self._inflight), default=0)

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
        # an answer fim refused (`fim.mcp.capped`) ends the start as a lost connection would
        reason = self.cut or describe_exception(exc)
        if isinstance(self.decl, StdioServer):
            command = " ".join([self.decl.command, *self.decl.args])
            tail = self.stderr_tail()
            if "Connection closed" in reason:
                reason = "the process exited before completing the MCP handshake"
            reason += (f" (stderr: {tail})" if tail else "") + f" [command: {command}]"
            reason += transport.network_note(self.name, self.decl, tail)
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
        if state == "crashed":
            now = self.clock()
            self.crashes = [at for at in self.crashes if now - at < CRASH_WINDOW] + [now]
            past = len(self.crashes) - FREE_CRASHES
            if past > 0:
                delay = max(delay, min(MAX_BACKOFF, 0.5 * 2 ** (past - 1)))
        self._retry_at = time.monotonic() + delay
