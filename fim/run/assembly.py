"""What the capability providers give one run: the tool registry and the prompt sections.

`assemble` asks every provider on `Services.providers` what the agent gets for this request
(tools, prompt sections, pinned tools, tools kept behind meta-tools) and renders the agent's
instructions; `meta_tools` names the tools that stand in front of others. It is its own
module because it is the one place a run's tools are gathered, apart from the rest of the
plan (`fim.run.plan`: model, metering, hooks, selection, context guard, engine), which only
consumes the `Assembly`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fim.build.instructions import InstructionsError, render_for_run
from fim.build.snapshot import Snapshot
from fim.errors import RunError
from fim.run.request_tools import REQUEST_TOOLS
from fim.run.services import Provision, RunContext, load_provider
from fim.run.skills import READ_SKILL
from fim.tools.registry import ToolRegistry


@dataclass
class Assembly:
    """What the providers gave one run: prompt sections, the tool registry, the tools
    tool selection must keep, and each provider's contribution."""

    sections: list[tuple[str, str]]
    registry: ToolRegistry
    pinned: set[str] = field(default_factory=set)
    provisions: list[Provision] = field(default_factory=list)

    @property
    def capabilities(self) -> int:
        """Tools the agent has: the ones shown plus the ones behind meta-tools. This is
        what tool selection's threshold compares with, so a hub whose breadth sits behind
        a few meta-tools still gets its builtins trimmed per request."""
        return len(self.registry) + sum(p.hidden for p in self.provisions)

    @property
    def system_prompt(self) -> str:
        return "\n\n".join(text for _, text in self.sections if text.strip())


def render_instructions(snapshot: Snapshot, ctx: RunContext) -> str:
    """Render the agent's instructions as a sandboxed Jinja2 template
    (`fim.build.instructions`, the environment `fim validate` checked them with); a
    template that cannot render fails the run with a RunError naming the file, never a
    traceback."""
    agent = ctx.agent
    if "{" not in agent.instructions:
        return agent.instructions.strip()
    try:
        return render_for_run(
            Path(snapshot.root), snapshot.project, agent, snapshot.prompt_files, snapshot.version
        )
    except InstructionsError as exc:
        src = snapshot.source("agent", agent.name)
        raise RunError(f"{src.path}: {exc.text}", hint=exc.hint) from None


async def assemble(ctx: RunContext) -> Assembly:
    """Ask every capability provider what this agent gets for this run (some providers,
    such as MCP, await their servers' tool lists)."""
    registry = ToolRegistry()
    sections: list[tuple[str, str]] = [("instructions", render_instructions(ctx.snapshot, ctx))]
    pinned: set[str] = set()
    provisions: list[Provision] = []
    if not ctx.services.providers:
        raise RunError(
            "no capability areas to assemble the run from: Services.providers is empty",
            hint="build Services with providers=fim.capabilities.CAPABILITIES",
        )
    for path in ctx.services.providers:
        provision = load_provider(path)(ctx)
        if not isinstance(provision, Provision | None) and inspect.isawaitable(provision):
            provision = await provision
        if provision is None:
            continue
        provisions.append(provision)
        for tool in provision.tools:
            registry.add(tool)
        pinned.update(provision.pinned)
        if provision.prompt:
            sections.append((_section_title(path), provision.prompt))
    return Assembly(sections=sections, registry=registry, pinned=pinned, provisions=provisions)


def _section_title(provider: str) -> str:
    """`fim.workflows.tool:provide` -> `workflows`, `fim.run.skills:provide` -> `skills`:
    the area a prompt section comes from."""
    parts = provider.split(":")[0].split(".")
    if parts[0] != "fim" or len(parts) < 2:
        return parts[-1]
    area = parts[1:]
    return area[1] if area[0] == "run" and len(area) > 1 else area[0]


def meta_tools(assembly: Assembly, modes: Mapping[str, str]) -> tuple[str, ...]:
    """The tools standing in front of others: those an area pins while it keeps tools
    behind them (`connector`, `database`, `mcp`), `read_skill` when skills are progressive
    (inline, it only reads a skill's files) and `request_tools`."""
    fronting = {name for p in assembly.provisions if p.hidden for name in p.pinned}
    fronting.add(REQUEST_TOOLS)
    if modes["skills"] == "progressive":
        fronting.add(READ_SKILL)
    return tuple(n for n in assembly.registry.names if n in fronting)


__all__ = ["Assembly", "assemble", "meta_tools", "render_instructions"]
