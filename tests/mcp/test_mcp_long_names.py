"""An MCP tool whose `{server}__{tool}` is over 64 characters (attack-52 F2).

Providers take function names of at most 64 characters, so fim shortens a longer name as it
does a connector's action: 54 characters and a digest of the whole name. The name is the
same in legacy mode, in the progressive `mcp` meta-tool's hook view and in `fim mcp tools`
(which shows the full name beside it), and hook matchers are tried against the shortened
name and the full one: a guard written with the server's name for its tool, or a glob on
the tail a cut name loses, blocks the call in every mode.

The server is real (tests/mcp_servers/longnames.py): its two destructive tools share their
first 59 characters, and each call that runs leaves a file in `marks/`.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.events import HookEvent, ToolResultEvent
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.mcp.provider import provide
from fim.run.services import RunContext, Services
from fim.testing.runs import run_events
from fim.tools.view import view_of
from fim.types import Tool
from tests.inprocess_cli import run_fim
from tests.mcp_servers.longnames import DELETE_ALL, DELETE_ONE

SERVER = Path(__file__).parents[1] / "mcp_servers" / "longnames.py"
FULL_ALL, FULL_ONE = f"srv__{DELETE_ALL}", f"srv__{DELETE_ONE}"
BLOCK = "echo 'records are not deleted here' >&2; exit 2"
MODES = ("legacy", "progressive")
MATCHERS = {
    "full": FULL_ALL,  # the name the server gives the tool, under its server
    "glob": "srv__*delete_all",  # a glob on the tail that a cut name loses
}


def write_project(root: Path, agents: dict[str, dict[str, object]]) -> Path:
    (root / "marks").mkdir(parents=True, exist_ok=True)
    server = {"command": sys.executable, "args": [str(SERVER), str(root / "marks")]}
    fim_yaml = {"name": "long-names", "mcp_servers": {"srv": server}}
    (root / "fim.yaml").write_text(json.dumps(fim_yaml))
    (root / "agents").mkdir(exist_ok=True)
    for name, body in agents.items():
        decl = {"instructions": "Tidy up.", "model": "openai/gpt-4o-mini", "mcp": ["srv"]}
        (root / "agents" / f"{name}.yaml").write_text(json.dumps({**decl, **body}))
    return root


def agent(mode: str, *matchers: str) -> dict[str, object]:
    hooks = [{"event": "PreToolUse", "matcher": m, "command": BLOCK} for m in matchers]
    return {"tool_modes": {"mcp": mode}, "hooks": hooks}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    agents = {f"{kind}_{mode}": agent(mode, m) for kind, m in MATCHERS.items() for mode in MODES}
    agents |= {f"plain_{mode}": agent(mode) for mode in MODES}
    return compile_project(write_project(tmp_path_factory.mktemp("long"), agents))


def ran(snapshot: Snapshot, tool: str) -> int:
    """How many times the server really ran `tool`."""
    return len(list((snapshot.root / "marks").glob(f"{tool}-*")))


async def offered(snapshot: Snapshot, name: str) -> list[Tool]:
    """The MCP tools a run of agent `name` is given."""
    services = Services(providers=CAPABILITIES, root=snapshot.root)
    try:
        context = RunContext(snapshot=snapshot, agent=snapshot.agent(name), services=services)
        provision = await provide(context)
        assert provision is not None
        return list(provision.tools)
    finally:
        await services.aclose()


def progressive_call(tool: str) -> dict[str, object]:
    return {"subcommand": "call", "server": "srv", "tool": tool, "parameters": {"note": "x"}}


async def legacy_name(snapshot: Snapshot, tool: str) -> str:
    """The name the model is offered for the server's `tool` in legacy mode."""
    tools = await offered(snapshot, "plain_legacy")
    return next(t.name for t in tools if t.metadata.get("tool") == tool)


async def call_as_the_model(snapshot: Snapshot, agent_name: str, mode: str, tool: str) -> list:
    """A run of `agent_name` whose model calls the server's `tool` once, by the name its
    mode offers (legacy: the tool as offered; progressive: `mcp call` with the server's
    own name for it)."""
    if mode == "legacy":
        step = tool_call(await legacy_name(snapshot, tool), {"note": "x"})
    else:
        step = tool_call("mcp", progressive_call(tool))
    model = ScriptedModel([step, text("done")])
    return await run_events(snapshot, agent_name, "Tidy up.", model=model)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(MATCHERS))
async def test_a_hook_on_the_full_name_or_its_tail_blocks_a_long_tool_in_every_mode(
    project: Snapshot, kind: str, mode: str
) -> None:
    before = ran(project, DELETE_ALL)
    events = await call_as_the_model(project, f"{kind}_{mode}", mode, DELETE_ALL)

    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and "records are not deleted here" in result.content
    blocks = [e for e in events if isinstance(e, HookEvent) and e.decision == "block"]
    assert len(blocks) == 1
    assert ran(project, DELETE_ALL) == before, "the destructive tool must not have run"


def test_two_tools_sharing_64_characters_get_distinct_names_that_every_mode_agrees_on(
    project: Snapshot,
) -> None:
    async def names() -> tuple[dict[str, str], dict[str, str]]:
        tools = await offered(project, "plain_legacy")
        legacy = {t.metadata["tool"]: t.name for t in tools if getattr(t, "action", "") == "call"}
        (meta,) = await offered(project, "plain_progressive")
        viewed = {t: view_of(meta, progressive_call(t)).name for t in (DELETE_ALL, DELETE_ONE)}
        return legacy, viewed

    legacy, progressive = asyncio.run(names())
    listed = run_fim("--project", str(project.root), "mcp", "tools", "srv", "--json")
    assert listed.returncode == 0, listed.stderr
    cli = {t["name"]: t["fim_name"] for t in json.loads(listed.stdout)}
    assert {t["name"]: t["full_name"] for t in json.loads(listed.stdout)} == {
        DELETE_ALL: FULL_ALL,
        DELETE_ONE: FULL_ONE,
    }

    assert legacy == progressive == cli
    assert legacy[DELETE_ALL] != legacy[DELETE_ONE]
    for name in legacy.values():
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name), name
        assert name.startswith("srv__records_maintenance")

    shown = run_fim("--project", str(project.root), "mcp", "tools", "srv")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f"{legacy[DELETE_ALL]}  (full name: {FULL_ALL})  Delete every record (destructive)" in (
        lines
    )
    assert f"{legacy[DELETE_ONE]}  (full name: {FULL_ONE})  Delete one record (destructive)" in (
        lines
    )


def test_a_matcher_copied_from_fim_mcp_tools_guards_that_twin_alone_in_every_mode(
    tmp_path: Path,
) -> None:
    """The operator writes the name `fim mcp tools` prints for `..._delete_one`; in both
    modes it blocks that tool and not its twin (before, legacy mode named the twin
    `<cut>_2` and the progressive hook view gave both the same cut name)."""
    root = write_project(tmp_path, {})
    listed = run_fim("--project", str(root), "mcp", "tools", "srv", "--json")
    assert listed.returncode == 0, listed.stderr
    printed = {t["name"]: t["fim_name"] for t in json.loads(listed.stdout)}
    write_project(root, {f"one_{mode}": agent(mode, printed[DELETE_ONE]) for mode in MODES})
    snapshot = compile_project(root)

    async def run(mode: str) -> list[ToolResultEvent]:
        if mode == "legacy":  # the model calls the names `fim mcp tools` printed
            steps = [tool_call(printed[t], {"note": "x"}) for t in (DELETE_ONE, DELETE_ALL)]
        else:
            steps = [tool_call("mcp", progressive_call(t)) for t in (DELETE_ONE, DELETE_ALL)]
        model = ScriptedModel([*steps, text("done")])
        events = await run_events(snapshot, f"one_{mode}", "Tidy up.", model=model)
        return [e for e in events if isinstance(e, ToolResultEvent)]

    for n, mode in enumerate(MODES, start=1):
        one, every = asyncio.run(run(mode))
        assert one.is_error and "records are not deleted here" in one.content, mode
        assert not every.is_error and f"{DELETE_ALL} RAN" in every.content, mode
        assert (ran(snapshot, DELETE_ONE), ran(snapshot, DELETE_ALL)) == (0, n), mode
