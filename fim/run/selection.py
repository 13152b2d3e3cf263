"""Tool selection: show the model only the tools a request needs.

Every tool definition costs tokens on every call and dilutes the model's attention. Above a
threshold, one call to a fast model picks the few tools a request needs from a compact
catalogue; `request_tools` lets the working model load any other tool mid-run, so a wrong
pick costs one extra step rather than a failed task. Selection is an optimisation, never a
gate: when it fails for any reason the agent keeps every tool and the run says why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fim.events import Event, Notice
from fim.llm import fast_model  # MCP sampling uses it too: it lives with the models
from fim.masking import known
from fim.run.request_tools import (
    REQUEST_TOOLS,
    SkillToolLoader,
    catalogue,
    request_tools_tool,
)
from fim.run.skills import READ_SKILL
from fim.tools.registry import ToolRegistry
from fim.types import Message, Model, Usage

if TYPE_CHECKING:
    from fim.config.schema import ToolSelection

ALWAYS_KEPT = frozenset({READ_SKILL, REQUEST_TOOLS})

_SYSTEM = (
    "You choose tools for an AI assistant. Given a user request and a catalogue of tools, "
    "pick the tools the assistant most likely needs to complete the request, most useful "
    'first. Reply with JSON only, exactly in this shape: {{"tools": ["name", ...]}} with at '
    "most {max} names copied exactly from the catalogue."
)


@dataclass
class SelectionOutcome:
    """What selection did, for the engine's Notice event and for tests."""

    applied: bool
    """True when the registry was restricted to `active`."""
    reason: str
    active: list[str] = field(default_factory=list)
    """Tools the model sees after selection (all tools when not applied)."""
    chosen: list[str] = field(default_factory=list)
    """Valid names the selector picked (pinned tools not included)."""
    ignored: list[str] = field(default_factory=list)
    """Names the selector answered that are not tools (or were over the limit)."""
    usage: Usage = field(default_factory=Usage)

    @property
    def message(self) -> str:
        if self.applied:
            return (
                f"tool selection: {len(self.active)} tools shown ({', '.join(self.active)}); "
                "the rest stay loadable with request_tools"
            )
        return f"tool selection skipped: {self.reason}; all {len(self.active)} tools shown"

    def notice(self, run_id: str = "") -> Notice:
        data: dict[str, Any] = {
            "applied": self.applied,
            "reason": self.reason,
            "active": self.active,
            "chosen": self.chosen,
            "ignored": self.ignored,
        }
        return Notice(run_id=run_id, message=self.message, data=data)


def parse_choice(text: str) -> list[str]:
    """Tool names from the selector's reply: `{"tools": [...]}`, tolerating code fences,
    prose around the JSON, or a bare list. Raises ValueError when there is no such list."""
    candidates = [text.strip()]
    candidates += re.findall(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    candidates += re.findall(r"\{.*\}|\[.*\]", text, flags=re.DOTALL)
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, TypeError):
            continue
        if isinstance(value, dict):
            value = value.get("tools")
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    shown = known().head(text, 200)[0]  # masked whole, then cut: no piece of a secret
    raise ValueError(f'no {{"tools": [...]}} list in the reply {shown!r}')


async def select_tools(
    model: Model,
    request: str,
    registry: ToolRegistry,
    *,
    pinned: set[str],
    max_tools: int,
    threshold: int,
    capabilities: int | None = None,
) -> SelectionOutcome:
    """Restrict `registry` to the tools `request` needs, chosen by `model` (the fast role).

    `capabilities` is the agent's tool count including tools kept behind meta-tools
    (default: the registry's size); selection runs when it is above `threshold` and there
    are more selectable tools than `max_tools`. Pinned tools, `read_skill` and
    `request_tools` are always kept and never offered to the selector. On any failure the
    registry is left untouched (every tool visible).
    """
    skip = pointless(registry, pinned, max_tools, threshold, capabilities)
    if skip is not None:
        return SelectionOutcome(applied=False, reason=skip, active=registry.active_names)
    keep = [n for n in registry.names if n in pinned or n in ALWAYS_KEPT]
    offered = [t for t in registry if t.name not in keep]
    messages = [
        Message(role="system", content=_SYSTEM.format(max=max_tools)),
        Message(role="user", content=f"Request:\n{request}\n\nTools:\n{catalogue(offered)}"),
    ]
    try:
        response = await model.complete(messages)
        names = parse_choice(response.message.content or "")
    except Exception as exc:  # selection is best-effort; the run goes on with every tool
        return SelectionOutcome(
            applied=False,
            reason=f"the selector failed ({type(exc).__name__}: "
            f"{known().head(str(exc), 200)[0]})",  # masked whole, then cut
            active=registry.active_names,
        )
    offered_names = {t.name for t in offered}
    chosen = [n for n in dict.fromkeys(names) if n in offered_names][:max_tools]
    ignored = [n for n in names if n not in chosen and n not in keep]
    if not chosen:
        return SelectionOutcome(
            applied=False,
            reason="the selector named no valid tool"
            + (f" (it answered {', '.join(ignored[:10])})" if ignored else ""),
            active=registry.active_names,
            ignored=ignored,
            usage=response.usage,
        )
    if REQUEST_TOOLS not in registry:
        registry.add(request_tools_tool(registry))
        keep.append(REQUEST_TOOLS)
    registry.restrict([*keep, *chosen])
    reader = registry.get(READ_SKILL)
    if reader is not None and "skill_tools" in reader.metadata:
        registry.replace(SkillToolLoader(reader, registry))
    return SelectionOutcome(
        applied=True,
        reason="selected",
        active=registry.active_names,
        chosen=chosen,
        ignored=ignored,
        usage=response.usage,
    )


def _size(registry: ToolRegistry, capabilities: int | None) -> int:
    return len(registry) if capabilities is None else max(capabilities, len(registry))


def needed(registry: ToolRegistry, threshold: int, capabilities: int | None = None) -> bool:
    """Whether an agent with these tools is above the selection threshold."""
    return _size(registry, capabilities) > threshold


def pointless(
    registry: ToolRegistry,
    pinned: set[str],
    max_tools: int,
    threshold: int,
    capabilities: int | None = None,
) -> str | None:
    """Why selection would change nothing for these tools (no model call is worth making),
    or None when it should run."""
    if not needed(registry, threshold, capabilities):
        return f"{_size(registry, capabilities)} tools, not above the threshold of {threshold}"
    selectable = sum(1 for n in registry.names if n not in pinned and n not in ALWAYS_KEPT)
    if not selectable:
        return "every tool is pinned"
    if selectable <= max_tools:
        return (
            f"only {selectable} unpinned tools, not more than the {max_tools} selection would keep"
        )
    return None


async def select_with(
    fast_model: Callable[[], Model],
    request: str,
    registry: ToolRegistry,
    *,
    pinned: set[str],
    max_tools: int,
    threshold: int,
    capabilities: int | None = None,
) -> SelectionOutcome:
    """`select_tools` with the model a factory builds; a factory that fails (no fast model
    configured) keeps every tool and says why."""
    try:
        model = fast_model()
    except Exception as exc:  # no fast model configured: keep every tool, say why
        return SelectionOutcome(
            applied=False,
            reason=f"the fast model could not be built ({exc})",
            active=registry.active_names,
        )
    return await select_tools(
        model,
        request,
        registry,
        pinned=pinned,
        max_tools=max_tools,
        threshold=threshold,
        capabilities=capabilities,
    )


def first_turn_selection(
    fast_model: Callable[[], Model],
    request: str,
    registry: ToolRegistry,
    *,
    pinned: set[str],
    max_tools: int,
    threshold: int,
    capabilities: int | None = None,
    run_id: str = "",
) -> Callable[[], Awaitable[list[Event]]]:
    """An engine `on_turn` callback that runs selection once, before the first model call,
    and reports it as a Notice. The fast model is only built when selection is needed."""
    done = False

    async def on_turn() -> list[Event]:
        nonlocal done
        if done:
            return []
        done = True
        if pointless(registry, pinned, max_tools, threshold, capabilities) is not None:
            return []  # nothing to report: selection could not change the tool list
        outcome = await select_with(
            fast_model,
            request,
            registry,
            pinned=pinned,
            max_tools=max_tools,
            threshold=threshold,
            capabilities=capabilities,
        )
        return [outcome.notice(run_id)]

    return on_turn


def selection_settings(project: ToolSelection, agent: ToolSelection | None) -> ToolSelection:
    """The project's settings with the fields the agent sets replaced."""
    if agent is None:
        return project
    return project.model_copy(update=agent.model_dump(exclude_unset=True))


__all__ = [
    "ALWAYS_KEPT",
    "SelectionOutcome",
    "fast_model",
    "first_turn_selection",
    "needed",
    "parse_choice",
    "pointless",
    "select_tools",
    "select_with",
    "selection_settings",
]
