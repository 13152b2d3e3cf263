"""Prompt cost of a hub agent: progressive disclosure against legacy/inline.

The hub has 10 skills of about 2,000 tokens each, 30 builtin/connector tools (every
builtin fim ships, the rest as HTTP connector actions) and 3 MCP servers of 30 tools each.
The prompt is assembled by the real providers (fim.run.skills, fim.tools.builtin,
fim.connectors, fim.mcp); the MCP servers are not started: their connections are built
in-process with realistic tool lists, which is all the providers read. Tool selection runs
through `fim.run.selection.select_tools` with a ScriptedModel standing in for the fast model
(its pick is scripted; only the token counts are measured).

Counts are tiktoken tokens (cl100k_base) of the first request: system prompt plus tool
definitions. Not a timed test: it prints what one run measured.

    python bench/context_cost_skills.py
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from fim.build.snapshot import Skill, Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import (
    AgentDecl,
    HttpAction,
    HttpConnector,
    Project,
    SkillMeta,
    StdioServer,
    ToolModes,
)
from fim.run.assembly import assemble as real_assemble
from fim.run.services import RunContext, Services
from fim.run.tokens import count_messages, count_tokens
from fim.tools.registry import ToolRegistry
from fim.types import Message

MODEL: str | None = None
"""Tokenizer choice: None is cl100k_base, the encoding bench/context_cost.py reports in."""
SKILL_TOKENS = 2000
HUB_TOOLS = 30
INSTRUCTIONS = "You are the operations hub of Acme: support, sales ops, engineering and finance."
REQUEST = "Customer 42 wants a refund for order 1042; check the order and open a ticket."

SKILLS = {
    "refund-sop": "Step-by-step refund handling with approval thresholds, partial refunds and "
    "what to tell the customer.",
    "incident-triage": "Triage a production incident: severity matrix, log collection, paging "
    "and the first status update.",
    "sql-analyst": "Answer business questions from the shop database with safe read-only SQL "
    "and explain the numbers.",
    "release-notes": "Draft release notes from merged pull requests with the house template, "
    "grouped by user impact.",
    "brand-voice": "Write customer-facing text in the company voice: plain, friendly, no "
    "jargon, no exclamation marks.",
    "pdf-forms": "Fill customs and warranty PDF forms from order data and check every "
    "required field before saving.",
    "onboarding": "Onboard a new B2B customer: contract checks, account setup, kickoff call "
    "agenda and first-week follow-ups.",
    "churn-rescue": "Handle a cancellation request: find the reason, offer the right "
    "retention option, record the outcome.",
    "invoice-dispute": "Resolve an invoice dispute: compare the invoice with the contract, "
    "credit notes, escalation rules.",
    "security-review": "Review a vendor or integration for security: data flows, "
    "certifications, questionnaire and risk rating.",
}

_STEP_TITLES = [
    "Confirm who you are talking to",
    "Collect the facts",
    "Check the policy",
    "Decide and record",
    "Escalate when needed",
    "Tell the customer",
    "Close the loop",
    "Edge cases",
]
_SENTENCES = [
    "Look the record up by its id and compare the name and email with the person asking.",
    "Write down the date, the amount and the channel the request came through.",
    "If the record is older than the retention window, say so and stop.",
    "Use the thresholds in the reference file; never round them in the customer's favour.",
    "When two rules disagree, the stricter one applies until a lead decides otherwise.",
    "Record every decision with a one-line reason in the ticket before you answer.",
    "Escalate to the on-duty lead when the amount is above the limit or the customer is VIP.",
    "Never promise a date you cannot keep; give the usual delay and the reason for it.",
    "Quote the relevant clause verbatim when a customer challenges the decision.",
    "If data is missing, ask for exactly the missing field instead of restarting the process.",
    "Check for duplicates first: the same request often arrives by mail and by chat.",
    "Keep personal data out of internal channels; link to the ticket instead.",
]


def skill_body(name: str) -> str:
    """A procedure of about SKILL_TOKENS tokens, in the shape real SOPs have."""
    parts = [f"# {name.replace('-', ' ').title()}\n", "Follow these steps in order.\n"]
    step = 0
    while count_tokens("\n".join(parts), MODEL) < SKILL_TOKENS:
        title = _STEP_TITLES[step % len(_STEP_TITLES)]
        lines = [_SENTENCES[(step * 5 + k) % len(_SENTENCES)] for k in range(6)]
        parts.append(f"## {step + 1}. {title}\n" + "\n".join(f"- {s}" for s in lines) + "\n")
        step += 1
    return "\n".join(parts)


def make_skills(root: Path) -> dict[str, Skill]:
    skills = {}
    for name, description in SKILLS.items():
        folder = root / "skills" / name
        (folder / "references").mkdir(parents=True)
        (folder / "references" / "policy.md").write_text(f"# {name} policy\n\nLimits ...\n")
        meta = SkillMeta(name=name, description=description)
        skills[name] = Skill(name, meta, skill_body(name), folder, ("references/policy.md",))
    return skills


def make_connectors(actions: int) -> dict[str, HttpConnector]:
    """HTTP connectors with `actions` actions in total (CRM and ticketing)."""
    verbs = ["get", "list", "create", "update", "delete", "search"]
    objects = ["contact", "lead", "deal", "company", "ticket", "comment", "order", "invoice"]
    specs = [(v, o) for o in objects for v in verbs][:actions]
    half = len(specs) // 2
    result = {}
    for name, chunk in (("crm", specs[:half]), ("helpdesk", specs[half:])):
        result[name] = HttpConnector(
            kind="http",
            name=name,
            description=f"{name.upper()} API of Acme",
            base_url=f"https://{name}.acme.example/api",
            actions={
                f"{verb}_{obj}": HttpAction(
                    description=f"{verb.title()} a {obj} in the {name} system by its fields; "
                    f"returns the {obj} as JSON.",
                    method="GET" if verb in ("get", "list", "search") else "POST",
                    path=f"/{obj}s" + ("/{id}" if verb in ("get", "update", "delete") else ""),
                    access="read" if verb in ("get", "list", "search") else "write",
                    parameters=_params(verb, obj),
                )
                for verb, obj in chunk
            },
        )
    return result


def _params(verb: str, obj: str) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    if verb in ("get", "update", "delete"):
        props["id"] = {"type": "string", "description": f"Id of the {obj}."}
        required.append("id")
    if verb in ("list", "search"):
        props["query"] = {"type": "string", "description": "Free-text filter."}
        props["limit"] = {"type": "integer", "description": "At most this many results."}
    if verb in ("create", "update"):
        props["fields"] = {"type": "object", "description": f"Fields of the {obj} to set."}
        required.append("fields")
    return {"type": "object", "properties": props, "required": required}


MCP_SERVERS = {
    "github": (
        "GitHub: repositories, issues and pull requests",
        "repository",
        [
            "issue",
            "pull_request",
            "branch",
            "commit",
            "release",
            "workflow_run",
            "file",
            "comment",
            "label",
            "milestone",
        ],
    ),
    "jira": (
        "Jira Cloud: projects, issues, sprints and boards",
        "project",
        [
            "issue",
            "project",
            "sprint",
            "board",
            "comment",
            "worklog",
            "version",
            "component",
            "attachment",
            "filter",
        ],
    ),
    "slack": (
        "Slack workspace: channels, messages and users",
        "workspace",
        [
            "channel",
            "message",
            "thread",
            "user",
            "reaction",
            "file",
            "reminder",
            "bookmark",
            "usergroup",
            "pin",
        ],
    ),
}


def mcp_tool_infos(server: str) -> list[Any]:
    """30 tools per server in the shape MCP servers publish (list/get/create per resource)."""
    from fim.mcp.info import ToolInfo

    _, scope, resources = MCP_SERVERS[server]
    infos = []
    for resource in resources:
        for verb in ("list", "get", "create"):
            props: dict[str, Any] = {
                scope: {"type": "string", "description": f"The {scope} to work in."}
            }
            required = [scope]
            if verb == "list":
                props["state"] = {"type": "string", "enum": ["open", "closed", "all"]}
                props["per_page"] = {
                    "type": "integer",
                    "description": "Results per page (max 100).",
                }
                props["page"] = {"type": "integer", "description": "Page number, from 1."}
            elif verb == "get":
                props[f"{resource}_id"] = {
                    "type": "string",
                    "description": f"Id of the {resource}.",
                }
                required.append(f"{resource}_id")
            else:
                props["title"] = {"type": "string", "description": f"Title of the new {resource}."}
                props["body"] = {"type": "string", "description": "Content, Markdown allowed."}
                props["labels"] = {"type": "array", "items": {"type": "string"}}
                required.append("title")
            infos.append(
                ToolInfo(
                    name=f"{verb}_{resource}s" if verb == "list" else f"{verb}_{resource}",
                    description=f"{verb.title()} {resource.replace('_', ' ')}s of a {scope} in "
                    f"{server}. Returns JSON with ids, titles, authors and timestamps; "
                    "paginated results include a next_page cursor.",
                    input_schema={"type": "object", "properties": props, "required": required},
                )
            )
    return infos


def mcp_connections(root: Path) -> list[Any]:
    """Ready connections with published tool lists, without starting any server."""
    from fim.mcp.connection import ServerConnection

    conns = []
    for name, (description, _, _) in MCP_SERVERS.items():
        decl = StdioServer(command=f"{name}-mcp-server", description=description)
        conn = ServerConnection(name, decl, root)
        conn.state = "ready"
        conn.tools = mcp_tool_infos(name)
        conns.append(conn)
    return conns


async def assemble(ctx: RunContext, conns: list[Any]) -> Any:
    """`fim.run.assembly.assemble`, with the MCP connections injected instead of started."""
    import fim.mcp.provider

    async def injected(_: RunContext) -> list[Any]:
        return conns

    fim.mcp.provider.connections_for = injected  # servers are described in-process, not started
    return await real_assemble(ctx)


def prompt_tokens(sections: list[tuple[str, str]], registry: ToolRegistry) -> int:
    system = "\n\n".join(text for _, text in sections)
    return count_messages([Message(role="system", content=system)], registry.specs(), MODEL)


class Hub:
    """The hub agent's snapshot and run context in one tool mode."""

    def __init__(self, root: Path, legacy: bool, *, skills: bool, tools: bool, mcp: bool):
        import fim.tools.builtin

        builtins = fim.tools.builtin.names()
        connectors = make_connectors(HUB_TOOLS - len(builtins)) if tools else {}
        modes = (
            ToolModes(skills="inline", connectors="legacy", databases="legacy", mcp="legacy")
            if legacy
            else ToolModes()
        )
        agent = AgentDecl(
            name="hub",
            instructions=INSTRUCTIONS,
            tool_categories=sorted(fim.tools.builtin.categories()) if tools else [],
            connectors=list(connectors),
            mcp=list(MCP_SERVERS) if mcp else [],
            skills="all" if skills else [],
            tool_modes=modes,
        )
        self.snapshot = Snapshot(
            root=root,
            project=Project(
                name="acme",
                mcp_servers={n: StdioServer(command=n) for n in MCP_SERVERS},
            ),
            agents={"hub": agent},
            connectors=connectors,
            skills=make_skills(root) if skills else {},
        )
        self.services = Services(providers=CAPABILITIES, root=root)
        self.ctx = RunContext(snapshot=self.snapshot, agent=agent, services=self.services)


PICKS = ("request", "largest")
"""What the scripted fast model picks: `request` is what the refund request needs (tools
about orders, tickets, contacts, plus the calculator); `largest` fills every slot with the
most expensive definitions, the worst a selector can do to the prompt."""


def scripted_pick(registry: ToolRegistry, pinned: set[str], limit: int, pick: str) -> list[str]:
    from fim.run.selection import ALWAYS_KEPT

    offered = [t for t in registry if t.name not in pinned and t.name not in ALWAYS_KEPT]
    if pick == "largest":
        offered.sort(key=lambda t: -prompt_tokens([], ToolRegistry([t])))
        return [t.name for t in offered[:limit]]
    keywords = ("order", "ticket", "contact", "calculator")
    return [t.name for t in offered if any(k in t.name for k in keywords)][:limit]


async def measure(
    legacy: bool,
    *,
    skills: bool = True,
    tools: bool = True,
    mcp: bool = True,
    select: bool = False,
    pick: str = "request",
) -> dict[str, Any]:
    """Assemble the hub in one mode; with `select`, run tool selection as a run would
    (project defaults: threshold 12, max 6; counting tools behind meta-tools)."""
    from fim.llm.scripted import ScriptedModel, text
    from fim.run.selection import select_tools

    for var in (
        "FIM_SKILL_TOOL_MODE",
        "FIM_CONNECTOR_TOOL_MODE",
        "FIM_MCP_TOOL_MODE",
        "FIM_DATABASE_TOOL_MODE",
    ):
        os.environ.pop(var, None)
    with tempfile.TemporaryDirectory() as tmp:
        hub = Hub(Path(tmp), legacy, skills=skills, tools=tools, mcp=mcp)
        conns = mcp_connections(Path(tmp)) if mcp else []
        assembly = await assemble(hub.ctx, conns)
        sections, registry = assembly.sections, assembly.registry
        result: dict[str, Any] = {
            "tools": len(registry),
            "capabilities": assembly.capabilities,
            "sections": {t: count_tokens(x, MODEL) for t, x in sections},
            "tool_tokens": prompt_tokens([], registry) - prompt_tokens([], ToolRegistry()),
            "total": prompt_tokens(sections, registry),
        }
        if select:
            settings = hub.snapshot.project.tool_selection
            picks = scripted_pick(registry, assembly.pinned, settings.max, pick)
            fast = ScriptedModel([text(json.dumps({"tools": picks}))])
            outcome = await select_tools(
                fast,
                REQUEST,
                registry,
                pinned=assembly.pinned,
                max_tools=settings.max,
                threshold=settings.threshold,
                capabilities=assembly.capabilities,
            )
            result["selection"] = outcome
            result["selector_tokens"] = (
                count_messages(fast.requests[0][0], None, MODEL) if fast.requests else 0
            )
            result["selected_total"] = prompt_tokens(sections, registry)
            result["selected_tools"] = len(registry.specs())
        await hub.services.aclose()
    return result


Rows = list[tuple[str, int, int]]
"""(scenario, progressive tokens, legacy tokens), the shape bench/context_cost.py tabulates."""


def skills_rows() -> Rows:
    """10 skills of ~2,000 tokens: inline bodies against stubs + read_skill."""
    legacy = asyncio.run(measure(True, tools=False, mcp=False))
    progressive = asyncio.run(measure(False, tools=False, mcp=False))
    return [("10 skills x ~2,000 tokens", progressive["total"], legacy["total"])]


def mcp_rows() -> Rows:
    """3 MCP servers of 30 tools: every tool registered against stubs + one `mcp` tool."""
    legacy = asyncio.run(measure(True, skills=False, tools=False))
    progressive = asyncio.run(measure(False, skills=False, tools=False))
    label = f"{legacy['tools']} MCP tools vs {progressive['tools']} meta"
    return [(label, progressive["total"], legacy["total"])]


def hub_rows() -> Rows:
    """Hub agent: 10 skills, 30 builtin/connector tools, 3 MCP servers x 30 tools, with the
    project's default tool selection (threshold 12, max 6)."""
    legacy = asyncio.run(measure(True, select=True))
    progressive = asyncio.run(measure(False, select=True))
    worst = asyncio.run(measure(False, select=True, pick="largest"))
    rows: Rows = [
        (f"prompt: {title}", progressive["sections"].get(title, 0), legacy["sections"][title])
        for title in ("instructions", "skills")
    ]
    for title in ("connectors", "mcp"):  # sections only progressive mode writes
        rows.append((f"prompt: {title}", progressive["sections"].get(title, 0), 0))
    rows.append(
        (
            f"tool defs ({progressive['tools']} vs {legacy['tools']})",
            progressive["tool_tokens"],
            legacy["tool_tokens"],
        )
    )
    rows.append(("all tools shown, total", progressive["total"], legacy["total"]))
    shown = (progressive["selected_tools"], legacy["selected_tools"])
    rows.append(
        (
            f"first request ({shown[0]} vs {shown[1]} tools)",
            progressive["selected_total"],
            legacy["selected_total"],
        )
    )
    rows.append(
        (
            f"  worst pick ({worst['selected_tools']} tools)",
            worst["selected_total"],
            legacy["selected_total"],
        )
    )
    for label, result in (("progressive", progressive), ("legacy", legacy)):
        shown_now = result["tools"]
        print(
            f"  {label}: {result['capabilities']} tools ({shown_now} shown, "
            f"{result['capabilities'] - shown_now} behind meta-tools); "
            f"{result['selection'].message}"
        )
        if result["selection"].applied:
            print(f"    selector call: {result['selector_tokens']:,} prompt tokens, once a run")
    print(f"  worst pick: {worst['selection'].message}")
    return rows


SECTIONS = {"skills": skills_rows, "mcp": mcp_rows, "hub": hub_rows}


def main() -> int:
    table = [(section, *row) for section, rows_of in SECTIONS.items() for row in rows_of()]
    print(f"\n{'section':<7} {'scenario':<34} {'progressive':>11} {'legacy':>8} {'fewer':>7}")
    for section, scenario, progressive, legacy in table:
        fewer = f"{1 - progressive / legacy:>7.1%}" if legacy else f"{'-':>7}"
        print(f"{section:<7} {scenario:<34} {progressive:>11,} {legacy:>8,} {fewer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
