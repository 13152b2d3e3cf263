"""The context guard: keep a long run inside the model's context window.

Tool observations are the bulk of a long ReAct run and are mostly read once, so the guard
first shortens old observations (head and tail kept, the cut stated), and only when that
is not enough condenses older turns into one summary written by the fast model. The
system prompt and the last turns are never touched, and an assistant message that called
tools always keeps its tool results: providers reject a conversation where they part.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fim import masking
from fim.errors import RunError
from fim.llm.catalog import context_window
from fim.llm.wire import arguments_json
from fim.run.tokens import count_message, count_messages, tool_definition
from fim.types import Message, Model, ToolSpec

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl

Summarizer = Model | Callable[[], Model] | None


class ContextOverBudget(RunError):
    """The conversation cannot be brought under the budget: the turn fails instead of
    sending a request the provider would reject (or silently truncate)."""


SUMMARY_PREFIX = "[Summary of the earlier conversation, condensed to fit the context budget]"
_TRUNCATE_ABOVE = 1200
"""Characters; shorter observations are not worth cutting."""
_KEEP_HEAD = 600
_KEEP_TAIL = 300
_TRANSCRIPT_MESSAGE_CHARS = 2000
_TRANSCRIPT_CHARS = 60_000
_SUMMARY_RESERVE = 600
"""Tokens reserved for the summary when deciding how many turns it must replace."""

_SUMMARISER_PROMPT = (
    "You condense the earlier part of a conversation between a user, an AI agent and its "
    "tools so the agent can continue the task without it. Keep: the user's goals and "
    "constraints, decisions made, facts learned from tools (ids, names, numbers, dates, "
    "errors), and what remains to do. Drop pleasantries and repetition. Write at most "
    "250 words of plain text, no preamble."
)


def context_budget(
    model: str,
    *,
    agent_budget: int | None = None,
    window: int | None = None,
    max_output: int | None = None,
) -> int:
    """The conversation budget of an agent: `context_budget`, else the model's window minus
    room for the reply (the reply shares the window with the prompt)."""
    if agent_budget:
        return agent_budget
    total = context_window(model, window)
    return total - min(max_output or 4096, total // 4)


def guard_for(snapshot: Snapshot, agent: AgentDecl, summarizer: Summarizer) -> ContextGuard:
    """The guard of one agent: its `context_budget`, else its model's window less room for
    the reply; `summarizer` is the `fast` role's model or a factory of it (None: older turns
    are dropped instead of summarised)."""

    budget, model = guard_budget(snapshot, agent)
    return ContextGuard(budget_tokens=budget, summarizer=summarizer, model=model)


_BUDGETS: dict[tuple[int, int], tuple[Snapshot, AgentDecl, int, str]] = {}
"""`guard_budget` of each (snapshot, agent), by identity (both held, so no id is reused
while cached): a snapshot is immutable and a reload makes a new one, so the budget, which
depends on nothing else (the catalog is read once per process), is worked out once."""


def guard_budget(snapshot: Snapshot, agent: AgentDecl) -> tuple[int, str]:
    """The conversation budget of `agent` and the model string its tokens are counted
    with (`guard_for`)."""
    key = (id(snapshot), id(agent))
    known = _BUDGETS.get(key)
    if known is not None and known[0] is snapshot and known[1] is agent:
        return known[2], known[3]
    try:
        settings = snapshot.model_settings(agent.model)
    except RunError:
        settings = None
    model = settings.model if settings else str(agent.model)
    budget = context_budget(
        model,
        agent_budget=agent.context_budget,
        window=settings.context_window if settings else None,
        max_output=settings.max_tokens if settings else None,
    )
    if len(_BUDGETS) > 256:
        _BUDGETS.clear()
    _BUDGETS[key] = (snapshot, agent, budget, model)
    return budget, model


_TOOL_BYTES: dict[int, tuple[ToolSpec, int]] = {}
"""Each tool definition's share of `ContextGuard._upper_bound`, by the identity of its spec
(held, so the id is not reused while cached): `fim.tools.registry` keeps one spec per
tool, so the same definitions are measured once per process instead of once per run."""


@dataclass
class ContextGuard:
    """Fits a conversation into `budget_tokens` before each model call."""

    budget_tokens: int
    summarizer: Summarizer = None
    """A model, or a factory called on first need (most runs never summarise)."""
    keep_last: int = 4
    model: str | None = None
    """Model string used to pick the tokenizer."""
    _summaries: dict[str, str] = field(default_factory=dict, repr=False)
    _message_bytes: dict[int, tuple[Message, object, object, int]] = field(
        default_factory=dict, repr=False
    )
    """Each message's share of `_upper_bound`, by identity: the conversation is re-sent on
    every model call, and re-encoding all of it each time grew with the run's length."""

    def bind(
        self, tools: Callable[[], Sequence[ToolSpec]]
    ) -> Callable[[list[Message]], Awaitable[tuple[list[Message], list[str]]]]:
        """The engine's `fit_context(messages)` callable, reading the current tool list."""

        async def fit_context(messages: list[Message]) -> tuple[list[Message], list[str]]:
            specs = list(tools())
            if self._upper_bound(messages, specs) <= self.budget_tokens:
                return messages, []  # `fit`'s common case, decided without its coroutine
            return await self.fit(messages, specs)

        return fit_context

    async def fit(
        self, messages: list[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[Message], list[str]]:
        """Return messages within the budget (unchanged when they fit) and notes on what
        was cut, for the engine to report as Notice events."""
        if self._upper_bound(messages, tools) <= self.budget_tokens:
            return messages, []  # the common case, decided without loading a tokenizer
        # a large conversation (a caller's 1 MiB message: ~0.2 s of tokenizing) is counted
        # on a thread, which tiktoken runs without the GIL: the event loop goes on
        fixed, counts = await asyncio.to_thread(self._counts, messages, tools)
        total = fixed + sum(counts)  # kept as counts change: one sum, not one per message
        if total <= self.budget_tokens:
            return messages, []
        messages = list(messages)
        head = 1 if messages and messages[0].role == "system" else 0
        tail = _tail_start(messages, head, self.keep_last)
        notes: list[str] = []

        cut_chars = truncated = 0
        for i in range(head, tail):
            if total <= self.budget_tokens:
                break
            msg = messages[i]
            content = msg.content or ""
            if msg.role != "tool" or len(content) <= _TRUNCATE_ABOVE:
                continue
            removed = len(content) - _KEEP_HEAD - _KEEP_TAIL
            short = (
                f"{content[:_KEEP_HEAD]}\n[... {removed} characters of this old tool result "
                f"were cut to fit the context budget ...]\n{content[-_KEEP_TAIL:]}"
            )
            messages[i] = msg.model_copy(update={"content": short})
            new_count = count_message(messages[i], self.model)
            total += new_count - counts[i]
            counts[i] = new_count
            cut_chars += removed
            truncated += 1
        if truncated:
            notes.append(
                f"context guard: shortened {truncated} old tool result(s), "
                f"cutting {cut_chars} characters"
            )
        if total <= self.budget_tokens:
            return messages, notes

        end = _summary_end(messages, counts, head, tail, total, self.budget_tokens)
        if end > head:
            older = messages[head:end]
            replacement, note = await self._condense(older)
            messages[head:end] = [replacement]
            counts[head:end] = [count_message(replacement, self.model)]
            total = fixed + sum(counts)
            notes.append(note)
        if total > self.budget_tokens:
            # Last resort before failing: the recent tool results too (one huge observation
            # in the last turn is the usual culprit), head and tail kept.
            cut_recent = 0
            for i in range(tail, len(messages)):
                content = messages[i].content or ""
                if messages[i].role != "tool" or len(content) <= _TRUNCATE_ABOVE * 4:
                    continue
                keep_head, keep_tail = _KEEP_HEAD * 4, _KEEP_TAIL * 4
                removed = len(content) - keep_head - keep_tail
                short = (
                    f"{content[:keep_head]}\n[... {removed} characters of this tool result were "
                    f"cut to fit the context budget; ask for less ...]\n{content[-keep_tail:]}"
                )
                messages[i] = messages[i].model_copy(update={"content": short})
                new_count = count_message(messages[i], self.model)
                total += new_count - counts[i]
                counts[i] = new_count
                cut_recent += 1
            if cut_recent:
                notes.append(f"context guard: shortened {cut_recent} recent tool result(s)")
        if total > self.budget_tokens:
            raise ContextOverBudget(
                f"context guard: the conversation still needs {total} tokens, above the "
                f"budget of {self.budget_tokens}, after compaction; the request was not sent",
                hint=f"the system prompt ({count_message(messages[0], self.model) if head else 0}"
                f" tokens), the tool definitions ({fixed} tokens) and the last "
                f"{self.keep_last} messages are kept whole: fewer tools or skills, a shorter "
                "prompt, or a model with a larger context_window",
            )
        return messages, notes

    def _counts(self, messages: list[Message], tools: Sequence[ToolSpec]) -> tuple[int, list[int]]:
        """The tokens of the tool definitions and of each message."""
        return count_messages([], tools, self.model), [
            count_message(m, self.model) for m in messages
        ]

    def _upper_bound(self, messages: list[Message], tools: Sequence[ToolSpec]) -> int:
        """A token count no tokenizer can exceed: every BPE token covers at least one byte
        of UTF-8, plus a generous allowance for the chat format's framing."""
        total = 64
        for tool in tools:
            known_tool = _TOOL_BYTES.get(id(tool))
            if known_tool is not None and known_tool[0] is tool:
                total += known_tool[1] + 16
                continue
            size = len(json.dumps(tool_definition(tool), ensure_ascii=False).encode())
            if isinstance(tool, ToolSpec):  # a plain dict may be changed in place
                if len(_TOOL_BYTES) > 4096:
                    _TOOL_BYTES.clear()
                _TOOL_BYTES[id(tool)] = (tool, size)
            total += size + 16
        seen = self._message_bytes
        get = seen.get
        for m in messages:
            known = get(id(m))
            if known is not None:
                held, content, calls, size = known
                if held is m and content is m.content and calls is m.tool_calls:
                    total += size
                    continue
            size = 16 + len((m.content or "").encode())
            for call in m.tool_calls:
                size += (
                    16 + len(call.name) + len((call.raw_arguments or arguments_json(call)).encode())
                )
            if len(seen) > 4096:  # a guard kept longer than one run stays bounded
                seen.clear()
            seen[id(m)] = (m, m.content, m.tool_calls, size)
            total += size
        return total

    async def _condense(self, older: list[Message]) -> tuple[Message, str]:
        """One message standing in for `older`: a model-written summary, or a plain note
        that turns were dropped when there is no summarizer or it fails."""
        key = hashlib.sha256(
            json.dumps([m.model_dump(mode="json") for m in older], sort_keys=True).encode()
        ).hexdigest()
        summary = self._summaries.get(key)
        failure = ""
        if summary is None and self.summarizer is not None:
            request = [
                Message(role="system", content=_SUMMARISER_PROMPT),
                Message(role="user", content=transcript(older)),
            ]
            try:
                if not isinstance(self.summarizer, Model):
                    self.summarizer = self.summarizer()
                response = await self.summarizer.complete(request)
                summary = (response.message.content or "").strip() or None
                failure = "" if summary else " (the summarizer returned nothing)"
            except Exception as exc:  # the run goes on with the turns dropped instead
                said = masking.known().head(str(exc), 200)[0]  # masked whole, then cut
                failure = f" (summarisation failed: {type(exc).__name__}: {said})"
        if summary is None:
            why = failure or " (no summarizer model)"
            text = (
                f"[{len(older)} earlier messages were removed to fit the context budget"
                f"{why}. Ask the user to repeat anything you need from them.]"
            )
            return Message(role="user", content=text), (
                f"context guard: dropped {len(older)} older messages{why}"
            )
        self._summaries[key] = summary
        content = f"{SUMMARY_PREFIX}\n{summary}"
        return Message(role="user", content=content), (
            f"context guard: summarised {len(older)} older messages"
        )


def _tail_start(messages: list[Message], head: int, keep_last: int) -> int:
    """Index where the always-kept tail begins, moved back so that it never starts in the
    middle of a tool exchange (tool results without the assistant call that asked)."""
    tail = max(head, len(messages) - keep_last)
    while tail > head and messages[tail].role == "tool":
        tail -= 1
    return tail


def _summary_end(
    messages: list[Message],
    counts: list[int],
    head: int,
    tail: int,
    total: int,
    budget: int,
) -> int:
    """The shortest run of older messages, from `head`, whose replacement by a summary fits
    the budget (`total`: the conversation's tokens now, tool definitions included); it ends
    where a new exchange begins so tool pairs stay together."""
    removed = 0
    for end in range(head + 1, tail + 1):
        removed += counts[end - 1]
        boundary = end == tail or messages[end].role != "tool"
        if boundary and total - removed + _SUMMARY_RESERVE <= budget:
            return end
    return tail


def transcript(messages: Sequence[Message]) -> str:
    """A plain-text rendering of turns for the summarizer, long contents cut."""
    lines: list[str] = []
    for msg in messages:
        content = msg.content or ""
        if len(content) > _TRANSCRIPT_MESSAGE_CHARS:
            content = content[:_TRANSCRIPT_MESSAGE_CHARS] + " [...]"
        if msg.role == "tool":
            lines.append(f"TOOL RESULT ({msg.name or msg.tool_call_id}): {content}")
            continue
        if content:
            lines.append(f"{msg.role.upper()}: {content}")
        for call in msg.tool_calls:
            args = json.dumps(call.arguments, ensure_ascii=False)[:500]
            lines.append(f"ASSISTANT CALLED {call.name}({args})")
    text = "\n".join(lines)
    if len(text) > _TRANSCRIPT_CHARS:
        half = _TRANSCRIPT_CHARS // 2
        text = f"{text[:half]}\n[... middle of the transcript omitted ...]\n{text[-half:]}"
    return text


__all__ = [
    "SUMMARY_PREFIX",
    "ContextGuard",
    "ContextOverBudget",
    "context_budget",
    "context_window",
    "guard_for",
    "transcript",
]
