"""The ReAct engine: ask the model, run the tools it picks, feed back observations, repeat.

Everything a run does is yielded as an Event, in order. Tool calls of one model turn run
concurrently; each passes PreToolUse hooks, the registry (validation, timeout, exceptions
turned into observations) and PostToolUse hooks. Hooks run here, outside the model's
reach: a blocked call never runs and the model only sees the hook's reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fim.errors import FimError
from fim.events import (
    ErrorEvent,
    Event,
    HookRunner,
    LLMCall,
    MessageEvent,
    NoHooks,
    Notice,
    RunFinished,
    RunStarted,
    Token,
    ToolCallEvent,
    ToolResultEvent,
)
from fim.llm.media import accepted_media, media_message
from fim.observe import current_call
from fim.observe.context import current_events
from fim.tools.registry import ToolRegistry
from fim.tools.view import prepare_view
from fim.types import (
    CallView,
    HookContext,
    HookResult,
    Message,
    Model,
    ModelResponse,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)

ViewFn = Callable[[str, dict[str, Any]], CallView]
"""(tool name, arguments) -> what hooks see: the real target, its arguments and metadata.
Raises when it cannot tell; the call is then blocked."""


class Finalizer(Protocol):
    """The check of a final answer (`fim.structured.OutputContract` implements it)."""

    def problem(self, text: str) -> str | None: ...
    def normalize(self, text: str) -> str: ...
    def retry_message(self, problem: str) -> str: ...


ContextFitter = Callable[[list[Message]], Awaitable[tuple[list[Message], list[str]]]]

MAX_CALLS_PER_TURN = 32
"""Tool calls of one model turn that run; the rest are answered with an error to call them
in a later turn. A model steered by injected text could otherwise ask for hundreds of
calls at once (each a task, a hook process, a request to a paid API)."""

_EMPTY_REPLY_NUDGE = (
    "Your last reply was empty. Either answer the user's request in text, "
    "or call one of the available tools."
)


_ALLOWED: list[tuple[HookResult, list[Any]]] = []
"""What `NoHooks` answers every time (built on first use), given without building a
HookContext to ask it: the engine only reads a result and its event list."""


def _allowed() -> tuple[HookResult, list[Any]]:
    if not _ALLOWED:
        _ALLOWED.append((HookResult(), []))
    return _ALLOWED[0]


def no_mask(text: str) -> str:
    """The mask of a project without secrets: the engine skips it (no copy of arguments)."""
    return text


_identity = no_mask


@dataclass
class ReactEngine:
    model: Model
    registry: ToolRegistry
    system_prompt: str
    agent: str
    run_id: str
    hooks: HookRunner = field(default_factory=NoHooks)
    max_iterations: int = 50
    tool_timeout: float = 60.0
    stream: bool = False
    snapshot_version: str = ""
    mask: Callable[[str], str] = _identity
    mask_observations: bool = True
    """Mask secrets in tool results before the model sees them (agent `mask_observations`)."""
    call_view: ViewFn | None = None
    fit_context: ContextFitter | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    """Run-level facts handed to every hook (read-only flags, depth ...)."""
    on_turn: Callable[[], Awaitable[list[Event]]] | None = None
    """Called before each model call; lets meta-tools (request_tools) change the tool set."""
    transcript: list[Message] = field(default_factory=list)
    """Kept equal to the conversation so far (without the system prompt), for hooks."""
    finalizer: Finalizer | None = None
    """Checks the final text answer (structured output, `fim.structured.OutputContract`):
    a rejected answer gets one retry with the reason, a second rejection fails the run."""
    accepts_media: frozenset[str] | None = None
    """`image`/`audio` the model takes as input: tool results' media is sent to it (None:
    ask `fim.llm.media.accepted_media` once, from the model's settings or litellm's table)."""
    client_tools: frozenset[str] = frozenset()
    """Tools the caller runs itself (OpenAI `tools`): a turn calling one ends the run after
    its `tool_call` events, without running anything, so the caller can answer them."""

    async def run(self, input: str | list[Message]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        history = [Message(role="user", content=input)] if isinstance(input, str) else list(input)
        prompt_text = next((m.content or "" for m in reversed(history) if m.role == "user"), "")
        yield RunStarted(
            run_id=self.run_id,
            agent=self.agent,
            input=self.mask(prompt_text),
            snapshot_version=self.snapshot_version,
        )
        spent: list[Usage] = []
        """The usage of each call, summed once when the run finishes (`_total`)."""

        def finish(output: str, status: str, iterations: int) -> RunFinished:
            return RunFinished(
                run_id=self.run_id,
                output=self.mask(output),
                status=status,  # type: ignore[arg-type]
                usage=_total(spent),
                iterations=iterations,
                duration_ms=(time.perf_counter() - started) * 1000,
            )

        system = self.system_prompt
        self.transcript[:] = history
        result, events = (
            _allowed()
            if type(self.hooks) is NoHooks
            else await self.hooks.run(
                "SessionStart",
                HookContext(
                    point="SessionStart",
                    agent=self.agent,
                    run_id=self.run_id,
                    metadata=dict(self.metadata),
                ),
            )
        )
        for hook_event in events:
            yield hook_event
        if not result.allow:
            reason = result.error or "a SessionStart hook refused the session"
            yield ErrorEvent(run_id=self.run_id, message=self.mask(reason), kind="hook_blocked")
            yield finish(reason, "error", 0)
            return
        if result.additional_context:
            system = f"{system}\n\n{result.additional_context}".strip()

        messages = [Message(role="system", content=system), *history] if system else history
        empty_replies = 0
        final_retried = False
        for iteration in range(1, self.max_iterations + 1):
            if self.on_turn is not None:
                for event in await self.on_turn():
                    yield event
            if self.fit_context is not None:
                try:
                    messages, notes = await self.fit_context(messages)
                except FimError as exc:  # over budget even compacted: never sent
                    yield ErrorEvent(
                        run_id=self.run_id, message=self.mask(str(exc)), kind="context_overflow"
                    )
                    yield finish(f"Context error: {exc}", "error", iteration)
                    return
                for note in notes:
                    yield Notice(run_id=self.run_id, message=note)
            t0 = time.perf_counter()
            response: ModelResponse | None = None
            try:
                if self.stream:
                    async for chunk in self.model.stream(messages, self.registry.specs() or None):
                        if isinstance(chunk, TextDelta):
                            yield Token(run_id=self.run_id, text=self.mask(chunk.text))
                        else:
                            response = chunk
                    if response is None:
                        raise FimError("the model stream ended without a final response")
                else:
                    response = await self.model.complete(messages, self.registry.specs() or None)
            except FimError as exc:
                spent.append(getattr(exc, "usage", Usage()))  # a call spent, then refused
                kind = getattr(exc, "kind", "model_error")  # budget_exceeded (fim.run.spend)
                yield ErrorEvent(run_id=self.run_id, message=self.mask(str(exc)), kind=kind)
                yield finish(f"Model error: {exc}", "error", iteration)
                return
            spent.append(response.usage)
            yield LLMCall(
                run_id=self.run_id,
                model=response.model or getattr(self.model, "name", ""),
                iteration=iteration,
                usage=response.usage,
                duration_ms=(time.perf_counter() - t0) * 1000,
                request_model=getattr(self.model, "name", ""),
                provider=getattr(self.model, "provider", "") or "",
                finish_reason=response.finish_reason,
            )
            reply = response.message
            if not reply.tool_calls:
                text = (reply.content or "").strip()
                if not text:
                    empty_replies += 1
                    if empty_replies >= 2:
                        message = "The model returned an empty reply twice; no answer was produced."
                        yield ErrorEvent(run_id=self.run_id, message=message, kind="empty_reply")
                        yield finish(message, "error", iteration)
                        return
                    messages = [*messages, Message(role="user", content=_EMPTY_REPLY_NUDGE)]
                    continue
                if self.finalizer is not None:
                    problem = self.finalizer.problem(text)
                    if problem is not None and not final_retried:
                        final_retried = True
                        yield Notice(
                            run_id=self.run_id,
                            message=self.mask(f"final answer rejected, retrying once: {problem}"),
                            data={"structured_output": "retry"},
                        )
                        messages = [
                            *messages,
                            Message(role="assistant", content=text),
                            Message(role="user", content=self.finalizer.retry_message(problem)),
                        ]
                        continue
                    if problem is not None:
                        message = f"The final answer was rejected after one retry: {problem}"
                        yield ErrorEvent(
                            run_id=self.run_id, message=self.mask(message), kind="invalid_output"
                        )
                        yield finish(message, "error", iteration)
                        return
                    text = self.finalizer.normalize(text)
                yield MessageEvent(run_id=self.run_id, content=self.mask(text))
                yield finish(text, "ok", iteration)
                return
            empty_replies = 0
            if self.client_tools and any(c.name in self.client_tools for c in reply.tool_calls):
                # The caller runs these: hand them over (server calls of the same turn are
                # not run; the model asks again once the caller's results are in).
                for call in reply.tool_calls:
                    if call.name in self.client_tools:
                        yield ToolCallEvent(
                            run_id=self.run_id,
                            call_id=call.id,
                            name=call.name,
                            arguments=_masked_args(call.arguments, self.mask),
                        )
                yield finish(reply.content or "", "ok", iteration)
                return
            messages = [
                *messages,
                Message(role="assistant", content=reply.content, tool_calls=reply.tool_calls),
            ]
            self.transcript.append(messages[-1])
            observations: list[Message] = []
            async for event in self._run_tools(reply.tool_calls, observations):
                yield event
            messages = [*messages, *observations]
            self.transcript.extend(observations)

        output = (
            f"Stopped after {self.max_iterations} iterations without a final answer "
            f"(max_iterations={self.max_iterations}). Raise max_iterations in the agent's "
            "YAML or narrow the request."
        )
        yield MessageEvent(run_id=self.run_id, content=output)
        yield finish(output, "max_iterations", self.max_iterations)

    # ------------------------------------------------------------------ tools

    async def _run_tools(
        self, calls: list[ToolCall], observations: list[Message]
    ) -> AsyncIterator[Event]:
        """Run one turn's tool calls concurrently, yielding events as they happen and
        appending the observations in the order the model asked for them."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
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
                f"Error: not run: this turn asked for {len(calls)} tool calls and at most "
                f"{MAX_CALLS_PER_TURN} run at once. Call '{call.name}' again in your next turn "
                "if you still need it."
            )

        for call in calls:
            yield ToolCallEvent(
                run_id=self.run_id,
                call_id=call.id,
                name=call.name,
                arguments=_masked_args(call.arguments, self.mask),
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
        self, call: ToolCall, queue: asyncio.Queue[Event | None], media: dict[str, list[Any]]
    ) -> str:
        t0 = time.perf_counter()
        arguments = call.arguments

        async def emit(content: str, is_error: bool) -> str:
            queue.put_nowait(
                ToolResultEvent(
                    run_id=self.run_id,
                    call_id=call.id,
                    name=call.name,
                    content=self.mask(content),
                    is_error=is_error,
                    duration_ms=(time.perf_counter() - t0) * 1000,
                )
            )
            return content

        # Invalid calls are answered before hooks: there is nothing for a hook to guard.
        problem = self.registry.check(call.name, arguments, call.raw_arguments)
        if problem is not None:
            return await emit(problem, True)
        try:
            await prepare_view(self.registry.get(call.name), arguments)
            view = self._view(call.name, arguments)
        except Exception as exc:
            return await emit(_unviewable(call.name, exc), True)
        no_hooks = type(self.hooks) is NoHooks  # allows everything: no context to build
        metadata = {} if no_hooks else {**self.metadata, "call_id": call.id}
        pre, events = (
            _allowed()
            if no_hooks
            else await self.hooks.run(
                "PreToolUse", view.context("PreToolUse", self.agent, self.run_id, metadata)
            )
        )
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
                again = self._view(call.name, arguments)
            except Exception as exc:
                return await emit(_unviewable(call.name, exc), True)
            if again.name != view.name:
                return await emit(
                    f"Blocked: a hook rewrote the call to '{view.name}' into a call to "
                    f"'{again.name}'; a rewrite may change arguments, not the target.",
                    True,
                )
            problem = self.registry.check(call.name, arguments)
            if problem is not None:
                return await emit(
                    f"A hook rewrote the arguments into an invalid call. {problem}", True
                )

        result: ToolResult = await self.registry.call(
            call.name, arguments, timeout=self.tool_timeout, checked=True
        )
        post, events = (
            _allowed()
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
        return await emit(content, result.is_error)

    def _view(self, name: str, arguments: dict[str, Any]) -> CallView:
        if self.call_view is None:
            return CallView(name, arguments)
        return self.call_view(name, arguments)


def _total(spent: list[Usage]) -> Usage:
    """`Usage() + spent[0] + spent[1] + ...`, field for field, as one object: `Usage.__add__`
    built a new one per model call."""
    if not spent:
        return Usage()
    if len(spent) == 1:
        return Usage() + spent[0]
    prompt = completion = cached = 0
    cost: float | None = None
    for usage in spent:
        prompt += usage.prompt_tokens
        completion += usage.completion_tokens
        cached += usage.cached_tokens
        cost = None if cost is None and usage.cost is None else (cost or 0) + (usage.cost or 0)
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, cost=cost, cached_tokens=cached
    )


def _unviewable(name: str, exc: Exception) -> str:
    return (
        f"Blocked: fim could not tell what the call to '{name}' targets ({exc}), so it was "
        "not run (hooks fail closed). Check the call's arguments against the tool's "
        "description."
    )


def _masked_args(arguments: dict[str, Any], mask: Callable[[str], str]) -> dict[str, Any]:
    if mask is _identity:  # nothing to mask: not even the import statement
        return arguments
    # deferred: loading fim.masking costs a few ms
    from fim.masking import mask_strings

    return mask_strings(arguments, mask)
