"""One model turn's tool calls, as the ReAct engine runs them: concurrently, each through
PreToolUse hooks, the registry (validation, timeout, exceptions turned into observations)
and PostToolUse hooks, with the observations handed back in the order the model asked.

Its own module because this is the guard around every call a model makes: hooks run here,
outside the model's reach, so a blocked call never runs and the model only sees the hook's
reason. The loop in `fim.engines.react` decides when a turn happens; `ReactEngine`
inherits these methods (no call layer is added per turn or per call).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from fim import startup_cost
from fim.events import (
    Event,
    HookRunner,
    NoHooks,
    Notice,
    ToolCallEvent,
    ToolResultEvent,
)
from fim.llm.media import accepted_media, media_message
from fim.observe import current_call
from fim.observe.context import current_events
from fim.schema_check import MAX_NESTING, nested_deeper
from fim.tools.registry import ToolRegistry
from fim.tools.view import ViewError, prepare_view, retargeted
from fim.types import (
    NOT_RUN,
    CallView,
    HookResult,
    Message,
    Model,
    ToolCall,
    ToolResult,
)

ViewFn = Callable[[str, dict[str, Any]], CallView]
"""(tool name, arguments) -> what hooks see: the real target, its arguments and metadata.
Raises when it cannot tell; the call is then blocked."""

MAX_CALLS_PER_TURN = 32
"""Tool calls of one model turn that run; the rest are answered with an error to call them
in a later turn. A model steered by injected text could otherwise ask for hundreds of
calls at once (each a task, a hook process, a request to a paid API)."""

_ALLOWED: list[tuple[HookResult, list[Any]]] = []
"""What `NoHooks` answers every time (built on first use), given without building a
HookContext to ask it: the engine only reads a result and its event list."""


def allowed() -> tuple[HookResult, list[Any]]:
    if not _ALLOWED:
        _ALLOWED.append((HookResult(), []))
    return _ALLOWED[0]


class EventQueue:
    """The events of one turn's tool calls, first in first out: what `asyncio.Queue` did
    here (an unbounded queue with one reader, the turn), without its bookkeeping for
    bounded sizes, several readers and `join` (its `put_nowait` and `get` were a fifth of a
    tool call's own work). `put_nowait` is handed to hooks and to the calls' live events."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Event | None] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Event | None) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():  # the reader was cancelled while it waited
                waiter.set_result(None)

    async def get(self) -> Event | None:
        items = self._items
        while not items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return items.popleft()


def no_mask(text: str) -> str:
    """The mask of a project without secrets: the engine skips it (no copy of arguments)."""
    return text


_identity = no_mask


class ToolTurn:
    """The tool-running half of `fim.engines.react.ReactEngine` (its fields, declared here
    for the methods that read them)."""

    model: Model
    registry: ToolRegistry
    agent: str
    run_id: str
    hooks: HookRunner
    tool_timeout: float
    mask: Callable[[str], str]
    mask_observations: bool
    call_view: ViewFn | None
    views: dict[str, CallView]
    metadata: dict[str, Any]
    accepts_media: frozenset[str] | None

    async def _run_tools(
        self, calls: list[ToolCall], observations: list[Message]
    ) -> AsyncIterator[Event]:
        """Run one turn's tool calls concurrently, yielding events as they happen and
        appending the observations in the order the model asked for them."""
        queue = EventQueue()
        results: dict[str, str] = {}
        media: dict[str, list[Any]] = {}

        async def one(call: ToolCall) -> None:
            current_call.set(call.id)  # this task's own context: traces its work under it
            current_events.set(queue.put_nowait)  # live events of the call (MCP progress)
            try:
                results[call.id] = await self._run_tool(call, queue, media)
            finally:
                queue.put_nowait(None)

        for call in calls[MAX_CALLS_PER_TURN:]:
            results[call.id] = (
                f"{NOT_RUN}this turn asked for {len(calls)} tool calls and at most "
                f"{MAX_CALLS_PER_TURN} run at once. Call '{call.name}' again in your next turn "
                "if you still need it."
            )

        for call in calls:
            view = self._target(call)
            if view is not None:
                self.views[call.id] = view
            real = view is not None and view.name != call.name
            yield ToolCallEvent(
                run_id=self.run_id,
                call_id=call.id,
                name=call.name,
                arguments=masked_args(call.arguments, self.mask),
                target=view.name if real and view else None,
                target_arguments=masked_args(view.args, self.mask) if real and view else None,
            )
        if hasattr(self.hooks, "on_notice"):  # e.g. "approval pending" while confirm waits
            self.hooks.on_notice = queue.put_nowait
        tasks = [asyncio.create_task(one(call)) for call in calls[:MAX_CALLS_PER_TURN]]
        for call in calls[MAX_CALLS_PER_TURN:]:
            yield ToolResultEvent(
                run_id=self.run_id,
                call_id=call.id,
                name=call.name,
                content=self.mask(results[call.id]),  # it names the model's tool name
                is_error=True,
                duration_ms=0.0,
            )
        try:
            pending = len(tasks)
            while pending:
                event = await queue.get()
                if event is None:
                    pending -= 1
                else:
                    yield event
            for task in tasks:
                task.result()
        finally:
            live = [task for task in tasks if not task.done()]
            for task in tasks:
                if task in live:
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # retrieved: no "exception was never retrieved" log
            if live:  # a gather of done tasks alone would cost a loop iteration
                await asyncio.gather(*live, return_exceptions=True)
        for call in calls:
            content = results[call.id]
            if self.mask_observations and (masked := self.mask(content)) != content:
                content = masked
                yield Notice(
                    run_id=self.run_id,
                    message=f"a secret in the result of '{call.name}' was masked before it "
                    "was sent to the model",
                    data={"masked": "observation", "call_id": call.id, "tool": call.name},
                )
            observations.append(
                Message(role="tool", tool_call_id=call.id, name=call.name, content=content)
            )
        if media:
            extra = self._media_message([(c.name, media[c.id]) for c in calls if c.id in media])
            if extra is not None:
                observations.append(extra)

    def _media_message(self, found: list[tuple[str, list[Any]]]) -> Message | None:
        """Tool results' images/audio as one user message, for a model that accepts them
        (others keep the text placeholder the observation already has)."""

        if self.accepts_media is None:
            self.accepts_media = accepted_media(self.model)
        if not self.accepts_media:
            return None
        return media_message(found, self.accepts_media)

    async def _run_tool(
        self, call: ToolCall, queue: EventQueue, media: dict[str, list[Any]]
    ) -> str:
        t0 = startup_cost.clock()
        startup = startup_cost.measuring()  # this task's: the one-off loads it waits for
        arguments = call.arguments

        async def emit(content: str, is_error: bool, raised: dict[str, Any] | None = None) -> str:
            at, text = (raised.get("at"), raised.get("traceback")) if raised else (None, None)
            queue.put_nowait(
                ToolResultEvent(
                    run_id=self.run_id,
                    call_id=call.id,
                    name=call.name,
                    content=self.mask(content),
                    is_error=is_error,
                    duration_ms=(startup_cost.clock() - t0 - startup[0]) * 1000,
                    startup_ms=startup[0] * 1000,
                    at=self.mask(at) if at else None,  # a project's tool raised: where
                    traceback=self.mask(text) if text else None,
                    http=_http(raised, self.mask),  # a connector's request (newcomer-53 #10)
                )
            )
            return content

        # Invalid calls are answered before hooks: there is nothing for a hook to guard.
        problem = await self.registry.check(call.name, arguments, call.raw_arguments)
        if problem is not None:
            return await emit(problem, True)
        try:
            await prepare_view(self.registry.get(call.name), arguments)
            view = self._view(call.name, arguments)
        except Exception as exc:
            return await emit(_unviewable(call.name, exc), True)
        no_hooks = type(self.hooks) is NoHooks  # allows everything: no context to build
        metadata = {} if no_hooks else {**self.metadata, "call_id": call.id}
        pre, events = allowed() if no_hooks else await self._pre_tool_use(call.name, view, metadata)
        for event in events:
            queue.put_nowait(event.model_copy(update={"call_id": call.id}))
        if not pre.allow:
            reason = pre.error or "blocked by a hook"
            return await emit(
                f"Blocked: the call to '{view.name}' was not run. Reason: {reason.rstrip('.')}."
                + (
                    ""
                    if "retry" in reason
                    else " Do not retry the same call; choose another approach or tell the user."
                ),
                True,
            )
        target_args = view.args
        if pre.modified_args is not None:
            # The rewrite is of the target's arguments; it applies to the call that runs.
            try:
                target_args = pre.modified_args
                arguments = view.call_arguments(target_args)
                await prepare_view(self.registry.get(call.name), arguments)
                again = self._view(call.name, arguments)
            except Exception as exc:
                return await emit(_unviewable(call.name, exc), True)
            if again.name != view.name:
                return await emit(f"Blocked: {retargeted(view.name, again.name)}.", True)
            view = again  # PostToolUse sees the call that ran
            problem = await self.registry.check(call.name, arguments)
            if problem is not None:
                return await emit(
                    f"A hook rewrote the arguments into an invalid call. {problem}", True
                )

        result: ToolResult = await self.registry.call(
            call.name, arguments, timeout=self.tool_timeout, checked=True
        )
        post, events = (
            allowed()
            if no_hooks
            else await self.hooks.run(
                "PostToolUse",
                view.rewritten(target_args).context(
                    "PostToolUse",
                    self.agent,
                    self.run_id,
                    {**metadata, "is_error": result.is_error},
                    result.content,
                ),
            )
        )
        for event in events:
            queue.put_nowait(event.model_copy(update={"call_id": call.id}))
        if not post.allow:
            reason = post.error or "blocked by a hook"
            return await emit(
                f"Blocked: the result of '{view.name}' was withheld. Reason: {reason}.", True
            )
        content = post.modified_result if post.modified_result is not None else result.content
        found = result.metadata.get("media")
        if found and isinstance(found, list) and post.modified_result is None:
            media[call.id] = found  # a hook that rewrote the result withholds the media too
        return await emit(content, result.is_error, result.metadata)

    async def _pre_tool_use(
        self, name: str, view: CallView, metadata: dict[str, Any]
    ) -> tuple[HookResult, list[Any]]:
        """The PreToolUse answer about the call that will run. A hook may rewrite the
        arguments; a chain that takes `review` then has the hooks that judged the old ones
        judge the rewritten call, whose view (target, `access`, SQL) this computes again
        from the rewritten arguments, so a rewrite cannot turn an allowed read into a write
        no guard saw."""
        context = view.context("PreToolUse", self.agent, self.run_id, metadata)
        if not getattr(self.hooks, "reviews", False):
            return await self.hooks.run("PreToolUse", context)

        async def review(target_args: dict[str, Any]) -> dict[str, Any]:
            arguments = view.call_arguments(target_args)
            await prepare_view(self.registry.get(name), arguments)
            again = self._view(name, arguments)
            if again.name != view.name:
                raise ViewError(retargeted(view.name, again.name))
            return {**again.metadata, **metadata}

        run: Any = self.hooks.run  # a HookChain or a Stacked (fim.hooks.stacked)
        result: tuple[HookResult, list[Any]] = await run("PreToolUse", context, review)
        return result

    def _target(self, call: ToolCall) -> CallView | None:
        """The target of `call` for its event, or None when there is no view or the target
        cannot be told (the call itself is then blocked, saying why: `_unviewable`)."""
        if self.call_view is None:
            return None
        try:
            return self.call_view(call.name, call.arguments)
        except ViewError:
            return None

    def _view(self, name: str, arguments: dict[str, Any]) -> CallView:
        if self.call_view is None:
            return CallView(name, arguments)
        return self.call_view(name, arguments)


def _unviewable(name: str, exc: Exception) -> str:
    return (
        f"Blocked: fim could not tell what the call to '{name}' targets ({exc}), so it was "
        "not run (hooks fail closed). Check the call's arguments against the tool's "
        "description."
    )


TOO_DEEP = "(not shown)"
"""The key of the arguments an event shows for a call whose own nest deeper than
`MAX_NESTING`: the registry refuses the call, and no event may hold a value the JSON
encoders (pydantic's, the stdlib's) refuse past their recursion limit (attack-53 F1: a
model's call nested 900 deep ended `fim run` in a traceback and `fim serve` in a 500)."""


def masked_args(arguments: dict[str, Any], mask: Callable[[str], str]) -> dict[str, Any]:
    """`arguments` as an event shows them: masked, and replaced by a note when they nest
    too deep to be encoded."""
    if nested_deeper(arguments):
        return {TOO_DEEP: f"the arguments are nested more than {MAX_NESTING} levels deep"}
    if mask is _identity:  # nothing to mask: not even the import statement
        return arguments
    # deferred: loading fim.masking costs a few ms
    from fim.masking import mask_strings

    return mask_strings(arguments, mask)


def _http(metadata: dict[str, Any] | None, mask: Callable[[str], str]) -> dict[str, Any] | None:
    """The `http` facts an HTTP connector's result carries (`fim.connectors.http_shown`),
    its URL masked with the run's secrets too."""
    facts = (metadata or {}).get("http")
    if not isinstance(facts, dict):
        return None
    return {**facts, "url": mask(str(facts.get("url", "")))}
