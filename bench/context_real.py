"""Progressive disclosure on public artifacts: a hub agent built from committed fixtures.

The hub carries the petstore and Discord OpenAPI specs (tests/fixtures/openapi, imported
with `fim connector import`'s code), a generated spec shaped like GitHub's 1,223
operations (GitHub's own is 13 MB, too big to commit), and the 12 Apache-2.0 skills of
anthropics/skills (tests/fixtures/skills_public). It prints the first request's prompt
tokens (system-prompt sections plus tool definitions, tiktoken cl100k/o200k offline) in
progressive and legacy mode, and the largest single observation the meta-tools can return
(every `discover` page of every connector, searches, schema requests), against the budget.

    python bench/context_real.py

Targets (issue 21): >= 97% fewer prompt tokens than legacy; no observation over budget.
Not a timed test: it prints what it saw.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fim.build.compile import compile_project  # noqa: E402
from fim.build.snapshot import Snapshot  # noqa: E402
from fim.capabilities import CAPABILITIES  # noqa: E402
from fim.config.schema import HttpConnector, ToolModes  # noqa: E402
from fim.connectors.discovery import budget_tokens, discover  # noqa: E402
from fim.connectors.openapi import import_openapi, load_document  # noqa: E402
from fim.connectors.provider import provide as connectors_provide  # noqa: E402
from fim.run.services import Provision, RunContext, Services  # noqa: E402
from fim.run.skills import provide as skills_provide  # noqa: E402
from fim.run.tokens import count_tokens  # noqa: E402
from fim.testing.openapi_specs import generated_spec  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
MODEL = "openai/gpt-4o"


def _tokens(text: str) -> int:
    return count_tokens(text, MODEL)


def connectors(tmp: Path) -> dict[str, dict[str, Any]]:
    discord = tmp / "discord.json"
    discord.write_bytes(
        gzip.decompress((FIXTURES / "openapi/discord/openapi.json.gz").read_bytes())
    )
    return {
        "petstore": import_openapi(
            load_document(FIXTURES / "openapi/petstore/petstore-expanded.yaml"), "petstore"
        ),
        "discord": import_openapi(load_document(discord), "discord"),
        "github": import_openapi(generated_spec(1223), "github"),
    }


def project(tmp: Path) -> Path:
    (tmp / "fim.yaml").write_text("name: real\nmodels:\n  general: openai/gpt-4o\n")
    (tmp / "connectors").mkdir()
    decls = connectors(tmp)
    for name, decl in decls.items():
        # JSON is YAML; `fim connector import` writes block YAML, but emitting it costs
        # more than everything this benchmark measures
        (tmp / "connectors" / f"{name}.yaml").write_text(json.dumps(decl, indent=1))
    (tmp / "agents").mkdir()
    (tmp / "agents" / "hub.yaml").write_text(
        f"instructions: You are the team's hub.\nskills: all\nconnectors: [{', '.join(decls)}]\n"
    )
    shutil.copytree(FIXTURES / "skills_public" / "anthropics", tmp / "skills")
    return tmp


def definitions(provision: Provision | None) -> str:
    if provision is None:
        return ""
    return json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in provision.tools
        ],
        ensure_ascii=False,
    )


async def first_request(snapshot: Snapshot, legacy: bool) -> tuple[int, int, int]:
    """(prompt-section tokens, tool-definition tokens, tools) of the hub's first request."""
    root = snapshot.root
    agent = snapshot.agent("hub")
    if legacy:
        modes = ToolModes(skills="inline", connectors="legacy", databases="legacy")
        agent = agent.model_copy(update={"tool_modes": modes})
    ctx = RunContext(
        snapshot=snapshot, agent=agent, services=Services(providers=CAPABILITIES, root=root)
    )
    parts = [await connectors_provide(ctx), skills_provide(ctx)]
    prompt = sum(_tokens(p.prompt or "") for p in parts if p)
    tools = sum(_tokens(definitions(p)) for p in parts if p)
    return prompt, tools, sum(len(p.tools) for p in parts if p)


def largest_observation(decls: dict[str, HttpConnector]) -> tuple[int, str]:
    """The most tokens any discover call returns, over every page, searches and schemas."""
    worst = (0, "")
    for name, decl in decls.items():
        calls: list[dict[str, Any]] = [{"page": p} for p in range(1, 200)]
        calls += [{"query": q} for q in ("message", "guild member", "pet", "create", "a")]
        calls += [{"tag": t} for a in decl.actions.values() for t in a.tags[:1]][:20]
        calls += [{"action": ",".join(decl.actions)}, {"action": next(iter(decl.actions))}]
        for args in calls:
            text = discover(name, decl, **args)
            if "page" in args and f"page {args['page']} of" not in text and args["page"] > 1:
                break
            worst = max(worst, (_tokens(text), f"{name} discover {args}"[:80]))
    return worst


async def largest_read_skill(snapshot: Snapshot) -> tuple[int, str]:
    """The most tokens one read_skill call returns, over every part of every skill body."""
    from fim.tools.registry import ToolRegistry

    agent = snapshot.agent("hub")
    ctx = RunContext(
        snapshot=snapshot,
        agent=agent,
        services=Services(providers=CAPABILITIES, root=snapshot.root),
    )
    provision = skills_provide(ctx)
    assert provision is not None
    tools = ToolRegistry(provision.tools)
    worst = (0, "")
    for name in snapshot.skills:
        part = 1
        while True:
            result = await tools.call("read_skill", {"name": name, "part": part})
            worst = max(worst, (_tokens(result.content), f"{name} part {part}"))
            if f"part={part + 1})" not in result.content:
                break
            part += 1
    return worst


def main() -> int:
    import os

    for var in ("DISCORD_API_KEY", "GITHUB_TOKEN", "PETSTORE_URL"):
        os.environ.setdefault(var, "bench-placeholder")  # the imports' ${VAR} credentials
    with tempfile.TemporaryDirectory() as tmp:
        root = project(Path(tmp))
        snapshot = compile_project(root)
        actions = {n: len(c.actions) for n, c in snapshot.connectors.items()}
        print(f"hub: {len(snapshot.skills)} public skills, connectors {actions}")
        prog = asyncio.run(first_request(snapshot, legacy=False))
        leg = asyncio.run(first_request(snapshot, legacy=True))
        for label, (p, t, n) in (("progressive", prog), ("legacy", leg)):
            print(f"  {label:<11} {n:>5} tools, prompt {p:>7} tok, tool definitions {t:>8} tok")
        total_p, total_l = prog[0] + prog[1], leg[0] + leg[1]
        print(
            f"first request: progressive {total_p} tok, legacy {total_l} tok, "
            f"{1 - total_p / total_l:.1%} fewer"
        )
        decls = {n: c for n, c in snapshot.connectors.items() if isinstance(c, HttpConnector)}
        worst, where = largest_observation(decls)
        budget = budget_tokens()
        verdict = "within" if worst <= budget else "OVER"
        print(f"largest discover observation: {worst} tok ({where}); budget {budget}: {verdict}")
        skill_worst, skill_where = asyncio.run(largest_read_skill(snapshot))
        verdict = "within" if skill_worst <= budget else "OVER"
        print(
            f"largest read_skill observation: {skill_worst} tok ({skill_where}); "
            f"budget {budget}: {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
