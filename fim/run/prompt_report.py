"""`fim show agent NAME --prompt`: what the model of an agent sees before the first user
message, section by section, with token counts.

What a user pays per call is invisible in the YAML (tool modes, skills, tool selection all
change it), so this renders the real assembly rather than re-deriving it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from fim.run.tokens import count_message, count_messages, count_tokens, count_tool, tool_definition
from fim.types import Message

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl
    from fim.run.agent import Assembly
    from fim.run.services import Services


def render_prompt_report(
    snapshot: Snapshot, agent_name: str, services: Services, request: str | None = None
) -> str:
    """The CLI's one-shot entry to `prompt_report`. It runs its own event loop, so it closes
    `services` before returning: MCP sessions opened for the report belong to that loop."""
    import asyncio

    async def run() -> str:
        # Loading the tokenizer (~0.6 s) overlaps the wait for MCP servers to start.
        warm = asyncio.create_task(asyncio.to_thread(_warm_tokenizer, snapshot, agent_name))
        try:
            return await prompt_report(snapshot, agent_name, services, request)
        finally:
            await warm
            await services.aclose()

    return asyncio.run(run())


def _warm_tokenizer(snapshot: Snapshot, agent_name: str) -> None:
    """Load the encoding the report will count with into `fim.run.tokens`' cache."""
    from fim.errors import RunError
    from fim.run.tokens import count_tokens

    try:
        model: str | None = snapshot.model_settings(snapshot.agent(agent_name).model).model
    except RunError:
        model = None
    count_tokens("warm", model)


async def prompt_report(
    snapshot: Snapshot, agent_name: str, services: Services, request: str | None = None
) -> str:
    """`fim show agent NAME --prompt`: the system prompt and tool definitions exactly as the
    model receives them at the start of a run, with the token cost of each section. With a
    `request`, tool selection runs for it (one call to the fast model) and the tools shown
    are the ones that request would get.

    What a user pays per call is invisible in the YAML (modes, skills, selection all change
    it), so this renders the real assembly rather than re-deriving it.
    """
    import inspect

    from fim.errors import RunError
    from fim.run.agent import assemble
    from fim.run.services import RunContext

    agent = snapshot.agent(agent_name)
    ctx = RunContext(snapshot=snapshot, agent=agent, services=services)
    try:
        model: str | None = snapshot.model_settings(agent.model).model
    except RunError:
        model = None
    assembly = assemble(ctx)
    if inspect.isawaitable(assembly):  # providers such as MCP need the event loop
        assembly = await assembly
    modes = ", ".join(f"{k}={ctx.mode(k)}" for k in ("skills", "connectors", "databases", "mcp"))
    out = [f"agent {agent_name} (model {model or agent.model}; modes: {modes})", ""]
    for title, text in assembly.sections:
        if text.strip():
            tokens = count_tokens(text, model)
            out += [f"=== system prompt: {title} ({tokens} tokens) ===", text, ""]
    selected = await _select(snapshot, agent, assembly, request) if request else []
    system = Message(role="system", content=assembly.system_prompt)
    system_tokens = count_message(system, model)
    specs = assembly.registry.specs()
    tool_tokens = [count_tool(spec, model) for spec in specs]
    out.append(f"=== tools: {len(specs)} definitions ({sum(tool_tokens)} tokens) ===")
    for spec, tokens in zip(specs, tool_tokens, strict=True):
        definition = json.dumps(tool_definition(spec), ensure_ascii=False)
        out += [f"# {spec.name} ({tokens} tokens)", definition]
    out += selected or _selection_lines(snapshot, agent, assembly)
    total = count_messages([system], specs, model)
    out += [
        "",
        f"total: {total} prompt tokens before the first user message "
        f"(system prompt {system_tokens}, tools {sum(tool_tokens)})",
    ]
    return snapshot.mask("\n".join(out))


async def _select(
    snapshot: Snapshot, agent: AgentDecl, assembly: Assembly, request: str
) -> list[str]:
    """Run tool selection on `assembly.registry` for `request`, as the first turn of a run
    would; the lines say what it did."""
    from fim.run.selection import fast_model, needed, select_tools, selection_settings

    settings = selection_settings(snapshot.project.tool_selection, agent.tool_selection)
    registry, size = assembly.registry, assembly.capabilities
    if not settings.enabled or not needed(registry, settings.threshold, size):
        below = f"{size} tools, not above the threshold of {settings.threshold}"
        return _selection_lines(snapshot, agent, assembly) or [
            "",
            f"tool selection: not run ({below})",
        ]
    try:
        model = fast_model(snapshot, agent)
    except Exception as exc:  # the run would keep every tool; so does the report
        return ["", f"tool selection for this request: the fast model could not be built ({exc})"]
    outcome = await select_tools(
        model,
        request,
        registry,
        pinned=assembly.pinned,
        max_tools=settings.max,
        threshold=settings.threshold,
        capabilities=size,
    )
    cost = outcome.usage.prompt_tokens + outcome.usage.completion_tokens
    return [
        "",
        f"tool selection for this request{outcome.message.removeprefix('tool selection')}"
        + (f" (selector call: {cost} tokens)" if cost else ""),
    ]


def _selection_lines(snapshot: Snapshot, agent: AgentDecl, assembly: Assembly) -> list[str]:
    """What tool selection will do to this agent's tool list, per request."""
    from fim.run.selection import ALWAYS_KEPT, needed, pointless, selection_settings

    selection = selection_settings(snapshot.project.tool_selection, agent.tool_selection)
    registry, size = assembly.registry, assembly.capabilities
    if not needed(registry, selection.threshold, size):
        return []
    if not selection.enabled:
        return ["", f"tool selection: off for this agent ({size} tools, all shown)."]
    behind = size - len(registry)
    counted = f"{size} tools" + (
        f" ({len(registry)} shown, {behind} behind meta-tools)" if behind else ""
    )
    above = f"tool selection: {counted} are above the threshold of {selection.threshold}"
    skip = pointless(registry, assembly.pinned, selection.max, selection.threshold, size)
    if skip is not None:
        return ["", f"{above}, but {skip}: every tool is shown."]
    kept = [n for n in registry.names if n in assembly.pinned or n in ALWAYS_KEPT]
    return [
        "",
        f"{above}; per request the fast model shows at most {selection.max} of the "
        f"{len(registry) - len(kept)} selectable tools plus the pinned ones "
        f"({', '.join(sorted(kept)) or 'none'}) and request_tools.",
    ]


__all__ = ["prompt_report", "render_prompt_report"]
