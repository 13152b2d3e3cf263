"""`fim show agent NAME --prompt`: what the model of an agent sees before the first user
message, section by section, with token counts.

What a user pays per call is invisible in the YAML (tool modes, skills, tool selection all
change it), so this renders the run's own plan (`fim.run.plan.build_plan`, the one an
engine is built from) rather than re-deriving it.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from fim.errors import RunError
from fim.run.plan import RunPlan, build_plan
from fim.run.services import RunContext
from fim.run.tokens import count_message, count_messages, count_tokens, count_tool, tool_definition
from fim.types import Message

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.run.services import Services


def render_prompt_report(
    snapshot: Snapshot, agent_name: str, services: Services, request: str | None = None
) -> str:
    """The CLI's one-shot entry to `prompt_report`. It runs its own event loop, so it closes
    `services` before returning: MCP sessions opened for the report belong to that loop."""

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

    The report is built from the same `RunPlan` a run's engine is built from (hooks off:
    a report is not a session, so no SessionStart hook runs)."""
    agent = snapshot.agent(agent_name)
    ctx = RunContext(snapshot=snapshot, agent=agent, services=services, hooks_enabled=False)
    plan = await build_plan(ctx, request or "")
    return render_plan(plan, ran_selection=await _select(plan) if request else None)


def render_plan(plan: RunPlan, ran_selection: list[str] | None = None) -> str:
    """The report of `plan`: its system prompt sections and tool definitions as the first
    model call sends them, token counts, and what tool selection does (`ran_selection`:
    the lines of a selection already run on the plan's registry)."""
    agent, model = plan.ctx.agent, plan.model_name
    modes = ", ".join(f"{k}={v}" for k, v in plan.modes.items())
    out = [f"agent {agent.name} (model {model or agent.model}; modes: {modes})", ""]
    for title, text in plan.sections:
        if text.strip():
            tokens = count_tokens(text, model)
            out += [f"=== system prompt: {title} ({tokens} tokens) ===", text, ""]
    system = Message(role="system", content=plan.system_prompt)
    system_tokens = count_message(system, model)
    specs = plan.registry.specs()
    tool_tokens = [count_tool(spec, model) for spec in specs]
    out.append(f"=== tools: {len(specs)} definitions ({sum(tool_tokens)} tokens) ===")
    for spec, tokens in zip(specs, tool_tokens, strict=True):
        definition = json.dumps(tool_definition(spec), ensure_ascii=False)
        out += [f"# {spec.name} ({tokens} tokens)", definition]
    out += ran_selection or _selection_lines(plan)
    total = count_messages([system], specs, model)
    out += [
        "",
        f"total: {total} prompt tokens before the first user message "
        f"(system prompt {system_tokens}, tools {sum(tool_tokens)})",
    ]
    return plan.snapshot.mask("\n".join(out))


async def _select(plan: RunPlan) -> list[str]:
    """Run the plan's tool selection on its registry for its request, as the first turn of
    the run would; the lines say what it did."""
    selection, registry = plan.selection, plan.registry
    settings, size = selection.settings, selection.capabilities
    if not settings.enabled or not selection.needed(registry):
        below = f"{size} tools, not above the threshold of {settings.threshold}"
        return _selection_lines(plan) or ["", f"tool selection: not run ({below})"]
    outcome = await selection.choose(registry)
    cost = outcome.usage.prompt_tokens + outcome.usage.completion_tokens
    return [
        "",
        f"tool selection for this request{outcome.message.removeprefix('tool selection')}"
        + (f" (selector call: {cost} tokens)" if cost else ""),
    ]


def _selection_lines(plan: RunPlan) -> list[str]:
    """What tool selection will do to this agent's tool list, per request."""
    selection, registry = plan.selection, plan.registry
    settings, size = selection.settings, selection.capabilities
    if not selection.needed(registry):
        return []
    if not settings.enabled:
        return ["", f"tool selection: off for this agent ({size} tools, all shown)."]
    behind = size - len(registry)
    counted = f"{size} tools" + (
        f" ({len(registry)} shown, {behind} behind meta-tools)" if behind else ""
    )
    above = f"tool selection: {counted} are above the threshold of {settings.threshold}"
    skip = selection.skip(registry)
    if skip is not None:
        return ["", f"{above}, but {skip}: every tool is shown."]
    kept = selection.kept(registry)
    return [
        "",
        f"{above}; per request the fast model shows at most {settings.max} of the "
        f"{len(registry) - len(kept)} selectable tools plus the pinned ones "
        f"({', '.join(sorted(kept)) or 'none'}) and request_tools.",
    ]


__all__ = ["prompt_report", "render_plan", "render_prompt_report"]
