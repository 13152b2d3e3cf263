"""The ReAct engine: ask the model, run the tools it picks, feed back observations, repeat.

Everything a run does is yielded as an Event, in order. This module is the loop: the
SessionStart hook, the context guard, the model call (streamed or not), empty and
rejected final answers, client tools, the iteration limit and the run's usage. One turn's
tool calls (concurrent, each through PreToolUse hooks, the registry and PostToolUse hooks)
are run by `fim.engines.tool_turn`, whose methods the engine inherits.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

from fim.engines.call_content import CallContent
from fim.engines.tool_turn import ToolTurn, ViewFn, allowed, masked_args, no_mask
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
)
from fim.structured import judged
from fim.tools.registry import ToolRegistry
from fim.types import (
    CallView,
    HookContext,
    Message,
    Model,
    ModelResponse,
    TextDelta,
    ToolResult,
    ToolSpec,
    Usage,
    session_source,
)


class Finalizer(Protocol):
    """The check of a final answer (`fim.structured.OutputContract` implements it)."""

    schema: dict[str, Any] | None
    untrusted: bool
    """The schema came from the caller: an answer is checked in a killable worker."""

    def problem(self, text: str) -> str | None: ...
    def normalize(self, text: str) -> str: ...
    def retry_message(self, problem: str) -> str: ...


CHECK_SECONDS = 2.0
"""How long checking one answer against a caller's schema may take (in a worker)."""


ContextFitter = Callable[[list[Message]], Awaitable[tuple[list[Message], list[str]]]]

_EMPTY_REPLY_NUDGE = (
    "Your last reply was empty. Either answer the user's request in text, "
    "or call one of the available tools."
)


@dataclass
class ReactEngine(ToolTurn):
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
    trace_id: str | None = None
    """The run's trace id when it is traced (`fim.run.agent` sets it from the run's watch):
    `run_started` carries it, so a run is found in the trace backend from its events."""
    mask: Callable[[str], str] = no_mask
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
    views: dict[str, CallView] = field(default_factory=dict)
    """The hook view of each tool call by call id, recorded when the model makes the call
    (`ToolTurn._run_tools`): hooks' transcript names a call by the target they judge."""
    finalizer: Finalizer | None = None
    """Checks the final text answer (structured output, `fim.structured.OutputContract`):
    a rejected answer gets one retry with the reason, a second rejection fails the run."""
    accepts_media: frozenset[str] | None = None
    """`image`/`audio` the model takes as input: tool results' media is sent to it (None:
    ask `fim.llm.media.accepted_media` once, from the model's settings or litellm's table)."""
    client_tools: frozenset[str] = frozenset()
    """Tools the caller runs itself (OpenAI `tools`): a turn calling one ends the run after
    its `tool_call` events, without running anything, so the caller can answer them."""
    capture: bool = False
    """Keep what each model call sent and got back on its `llm_call` event (masked, capped:
    `fim.engines.call_content`); `fim.run.capture` decides it for a run."""

    async def run(self, input: str | list[Message]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        history = [Message(role="user", content=input)] if isinstance(input, str) else list(input)
        prompt_text = next((m.content or "" for m in reversed(history) if m.role == "user"), "")
        yield RunStarted(
            run_id=self.run_id,
            agent=self.agent,
            input=self.mask(prompt_text),
            snapshot_version=self.snapshot_version,
            trace_id=self.trace_id,
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
            allowed()
            if type(self.hooks) is NoHooks
            else await self.hooks.run(
                "SessionStart",
                HookContext(
                    point="SessionStart",
                    agent=self.agent,
                    run_id=self.run_id,
                    metadata={**self.metadata, "source": session_source(history)},
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
        content = CallContent(self.mask) if self.capture else None
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
            specs = self.registry.specs()  # what the call offers, and its record says
            try:
                if self.stream:
                    # closed with the run: a budget counts a stream cut off when it is
                    chunks = self.model.stream(messages, specs or None)
                    async with aclosing(chunks) as stream:  # type: ignore[type-var]
                        async for chunk in stream:
                            if isinstance(chunk, TextDelta):
                                yield Token(run_id=self.run_id, text=self.mask(chunk.text))
                            else:
                                response = chunk
                    if response is None:
                        raise FimError("the model stream ended without a final response")
                else:
                    response = await self.model.complete(messages, specs or None)
            except FimError as exc:
                made: ModelResponse | None = getattr(exc, "response", None)
                if made is not None:  # made and paid for, then over a budget: it is reported
                    spent.append(made.usage)
                    yield self._llm_call(made, iteration, t0, content, messages, specs)
                else:
                    spent.append(getattr(exc, "usage", Usage()))
                kind = getattr(exc, "kind", "model_error")  # budget_exceeded (fim.run.spend)
                yield ErrorEvent(run_id=self.run_id, message=self.mask(str(exc)), kind=kind)
                output = str(exc) if kind == "budget_exceeded" else f"Model error: {exc}"
                yield finish(output, "error", iteration)
                return
            spent.append(response.usage)
            yield self._llm_call(response, iteration, t0, content, messages, specs)
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
                    answer, problem = await self._verdict(self.finalizer, text)
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
                    text = answer
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
                            arguments=masked_args(call.arguments, self.mask),
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

    def _llm_call(
        self,
        response: ModelResponse,
        iteration: int,
        t0: float,
        content: CallContent | None = None,
        messages: list[Message] | None = None,
        specs: list[ToolSpec] | None = None,
    ) -> LLMCall:
        """The event of one model call made (answered, or answered past a budget), with
        what it sent and got back when content is captured."""
        duration_ms = (time.perf_counter() - t0) * 1000
        request = answer = None
        if content is not None and messages is not None:
            offered = self.registry.specs() if specs is None else specs
            request = content.request(messages, offered, iteration)
            answer = content.response(response)
        return LLMCall(
            run_id=self.run_id,
            model=response.model or getattr(self.model, "name", ""),
            iteration=iteration,
            usage=response.usage,
            duration_ms=duration_ms,
            request_model=getattr(self.model, "name", ""),
            provider=getattr(self.model, "provider", "") or "",
            finish_reason=response.finish_reason,
            request=request,
            response=answer,
        )

    @staticmethod
    async def _verdict(contract: Finalizer, text: str) -> tuple[str, str | None]:
        """(the answer as sent on, None), or (text, why `contract` rejects it). A schema
        the caller sent is checked in a killable worker (`fim.structured.judged`): a few
        kilobytes of nested `anyOf` and `$ref` can keep a validator busy for hours, and
        on the event loop that would stop every run of the server."""
        if not contract.untrusted:
            problem = contract.problem(text)
            return (text, problem) if problem is not None else (contract.normalize(text), None)
        # deferred: the worker pool starts only for a caller's schema
        from fim.tools import isolate

        verdict = await isolate.run(
            judged,
            contract.schema,
            text,
            timeout=CHECK_SECONDS,
            hint="The request's response_format schema is too costly to check an answer "
            "against; simplify the schema.",
        )
        if isinstance(verdict, ToolResult):  # past the deadline: the worker was killed
            return text, verdict.content
        answer, problem = json.loads(verdict)
        return (answer, None) if problem is None else (text, problem)


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
