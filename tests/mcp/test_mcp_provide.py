"""What an agent gets from its `mcp:` list: the progressive `mcp` meta-tool with short
prompt stubs (default) or every tool registered (legacy), the CLI, `fim validate --live`,
and a run of the ReAct engine calling the published `mcp-server-time` server.

Servers are real: the demo server over stdio, the demo server with 100 extra tools over
streamable HTTP, `python -m mcp_server_time`, and a command that dies at startup.
"""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
import typer
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import HttpServer
from fim.mcp.connection import ServerConnection
from fim.mcp.info import ToolInfo
from fim.mcp.legacy import legacy_tools
from fim.mcp.meta import SUBCOMMANDS, McpMetaTool
from fim.mcp.provider import check_live, effective_tool_name, get_manager, provide
from fim.run.services import RunContext, Services
from fim.testing.runs import run_events
from fim.tools.registry import ToolRegistry
from tests.inprocess_cli import run_fim
from tests.mcp_servers.harness import DEMO, children, http_demo, processes_with

shared_loop = pytest.mark.asyncio(loop_scope="module")
BROKEN = "import sys; sys.stderr.write('fatal: DOCS_TOKEN is not set\\n'); sys.exit(2)"


def write_project(
    root: Path, servers: dict[str, dict[str, object]], agents: dict[str, str]
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        json.dumps({"name": "mcp-test", "mcp_servers": servers}, indent=1)
    )
    (root / "agents").mkdir(exist_ok=True)
    for name, body in agents.items():
        (root / "agents" / f"{name}.yaml").write_text(textwrap.dedent(body))
    return root


@pytest.fixture(scope="module")
def http_url():
    with http_demo(many=100) as url:
        yield url


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, http_url: str) -> Snapshot:
    servers = {
        "demo": {"command": sys.executable, "args": [str(DEMO)], "description": "Demo server"},
        "big": {"url": f"{http_url}/mcp", "description": "A server with a hundred tools"},
        "broken": {"command": sys.executable, "args": ["-c", BROKEN]},
        "time": {
            "command": sys.executable,
            "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        },
    }
    agents = {
        "helper": """
            instructions: Help.
            model: openai/gpt-4o-mini
            mcp: [demo, big, broken]
        """,
        "legacy": """
            instructions: Help.
            model: openai/gpt-4o-mini
            mcp: [demo, broken]
            tool_modes: {mcp: legacy}
        """,
        "clock": """
            instructions: Tell the time.
            model: openai/gpt-4o-mini
            mcp: [time]
            hooks:
              - event: PreToolUse
                matcher: "time__convert_*"
                command: "echo 'time conversions are not allowed here' >&2; exit 2"
        """,
    }
    return compile_project(write_project(tmp_path_factory.mktemp("proj"), servers, agents))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def services(project: Snapshot):
    services = Services(providers=CAPABILITIES, root=project.root)
    yield services
    await services.aclose()


def context(snapshot: Snapshot, services: Services, agent: str) -> RunContext:
    return RunContext(snapshot=snapshot, agent=snapshot.agent(agent), services=services)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def progressive(project: Snapshot, services: Services):
    return await provide(context(project, services, "helper"))


# --------------------------------------------------------------------------- progressive


@shared_loop
async def test_progressive_mode_gives_one_pinned_meta_tool_and_short_stubs(progressive):
    assert [t.name for t in progressive.tools] == ["mcp"]
    assert progressive.pinned == ["mcp"]
    assert progressive.hidden == 20 + 120, "tools of the ready servers count for selection"
    lines = progressive.prompt.splitlines()
    assert (
        "- demo: Demo server (20 tools: echo, add, fail, slow, crash, ...; "
        "also resources and prompts)" in lines
    )
    broken = next(line for line in lines if line.startswith("- broken:"))
    # the server's own words (its stderr, host paths) are not the operator's: the prompt
    # says it is down, a call's answer says why
    assert broken.startswith("- broken: unavailable (") and "DOCS_TOKEN" not in broken


@shared_loop
async def test_a_server_with_a_hundred_tools_keeps_a_short_stub(progressive):
    big = next(line for line in progressive.prompt.splitlines() if line.startswith("- big:"))
    assert big.startswith("- big: A server with a hundred tools (120 tools: echo, add,")
    assert len(big) < 160
    assert len(progressive.prompt) < 800


@shared_loop
async def test_the_meta_tool_lists_only_the_agents_servers(progressive):
    meta = progressive.tools[0]
    assert meta.parameters["properties"]["server"]["enum"] == ["demo", "big", "broken"]
    assert meta.parameters["properties"]["subcommand"]["enum"] == list(SUBCOMMANDS)
    assert meta.category == "mcp"


@shared_loop
async def test_discover_shows_tools_with_their_parameters(progressive):
    registry = ToolRegistry(progressive.tools)
    small = await registry.call("mcp", {"subcommand": "discover", "server": "demo"})
    assert "- add(a: integer, b: integer): Add two integers" in small.content
    assert '"required": ["a", "b"]' in small.content
    big = await registry.call("mcp", {"subcommand": "discover", "server": "big"})
    assert "- tool_099(x?: integer): Numbered tool 99" in big.content
    assert "full parameter schema" in big.content
    one = await registry.call(
        "mcp", {"subcommand": "discover", "server": "big", "tool": "tool_007"}
    )
    assert json.loads(one.content)["parameters"]["properties"]["x"]["type"] == "integer"


@shared_loop
async def test_call_runs_the_tool_and_explains_mistakes(progressive):
    registry = ToolRegistry(progressive.tools)

    async def call(**args):
        return await registry.call("mcp", {"subcommand": "call", **args})

    ok = await call(server="demo", tool="add", parameters={"a": 2, "b": 40})
    assert (ok.content, ok.is_error) == ("42", False)

    unknown = await call(server="demo", tool="multiply", parameters={})
    assert unknown.is_error
    assert "has no tool 'multiply'" in unknown.content and "echo, add" in unknown.content

    bad = await call(server="demo", tool="add", parameters={"a": "two"})
    assert bad.is_error
    assert "'b' is a required property" in bad.content
    assert "add(a: integer, b: integer)" in bad.content

    down = await call(server="broken", tool="search", parameters={})
    assert down.is_error
    assert "MCP server 'broken' is unavailable" in down.content
    assert "DOCS_TOKEN is not set" in down.content  # why: in the answer, not the prompt

    failed = await call(server="big", tool="fail", parameters={"message": "quota exceeded"})
    assert failed.is_error and "quota exceeded" in failed.content

    nope = await registry.call("mcp", {"subcommand": "call", "server": "nowhere", "tool": "x"})
    assert nope.is_error and "demo" in nope.content


@shared_loop
async def test_hooks_see_a_meta_call_as_the_real_tool(progressive):
    meta: McpMetaTool = progressive.tools[0]
    args = {"subcommand": "call", "server": "demo", "tool": "add", "parameters": {"a": 1}}
    assert effective_tool_name("mcp", args) == "demo__add"
    assert effective_tool_name("mcp", {"subcommand": "discover", "server": "demo"}) == "mcp"
    assert effective_tool_name("calculator", {"server": "demo"}) == "calculator"
    assert effective_tool_name(meta, args) == "demo__add"
    view = meta.metadata["call_view"](args)
    assert (view.name, view.args) == ("demo__add", {"a": 1})  # the tool's own arguments
    # the demo's `add` has no readOnlyHint: a write, as the MCP spec's defaults say
    assert view.metadata == {"server": "demo", "tool": "add", "category": "mcp", "access": "write"}
    assert view.call_arguments({"a": 2}) == {**args, "parameters": {"a": 2}}
    echo = {"subcommand": "call", "server": "demo", "tool": "echo", "parameters": {}}
    assert meta.metadata["call_view"](echo).metadata["access"] == "read"  # readOnlyHint
    crash = {"subcommand": "call", "server": "demo", "tool": "crash", "parameters": {}}
    assert meta.metadata["call_view"](crash).metadata["access"] == "write"  # destructiveHint


@shared_loop
async def test_runs_share_the_servers_of_one_process(project, services, progressive):
    again = await provide(context(project, services, "helper"))
    demo = get_manager(services).get("demo")
    assert demo is not None and demo.starts == 1
    assert again.tools[0].connections["demo"] is demo


# --------------------------------------------------------------------------- legacy


@shared_loop
async def test_legacy_mode_registers_every_tool(project, services):
    provision = await provide(context(project, services, "legacy"))
    names = [t.name for t in provision.tools]
    assert "demo__echo" in names and "demo__grow" in names
    assert all(t.category == "mcp" for t in provision.tools)
    assert provision.prompt is not None and "- broken: unavailable (" in provision.prompt
    result = await ToolRegistry(provision.tools).call("demo__echo", {"text": "hello"})
    assert result.content == "hello"


def test_tool_names_are_sanitised_and_shortened_with_a_digest_of_the_whole_name():
    def digest(full: str) -> str:
        return hashlib.sha256(full.encode()).hexdigest()[:8]

    conn = ServerConnection("gh", HttpServer(url="http://127.0.0.1:9/mcp"), Path("."))
    conn.state = "ready"
    conn.tools = [ToolInfo(n, "", {}) for n in ("repo.list", "repo_list", "x" * 80, "x" * 81)]
    names = [t.name for t in legacy_tools([conn])]
    assert names == [
        f"gh__repo_list_h{digest('gh__repo.list')}",
        "gh__repo_list",
        "gh__" + "x" * 50 + f"_h{digest('gh__' + 'x' * 80)}",
        "gh__" + "x" * 50 + f"_h{digest('gh__' + 'x' * 81)}",
    ]
    assert [t.remote for t in legacy_tools([conn])][:2] == ["repo.list", "repo_list"]


@shared_loop
async def test_env_mode_applies_when_the_agent_sets_none(project, services, monkeypatch):
    monkeypatch.setenv("FIM_MCP_TOOL_MODE", "legacy")
    provision = await provide(context(project, services, "helper"))
    assert len([t for t in provision.tools if t.name.startswith("big__tool_")]) == 100
    monkeypatch.setenv("FIM_MCP_TOOL_MODE", "progressive")
    assert (await provide(context(project, services, "legacy"))).tools[0].name == "demo__echo"


# --------------------------------------------------------------------------- end to end


@shared_loop
async def test_an_agent_run_calls_the_published_time_server_and_hooks_see_the_real_tool(
    project,
):
    from fim.events import HookEvent, RunFinished, ToolResultEvent
    from fim.llm.scripted import ScriptedModel, text, tool_call

    def call(tool: str, parameters: dict[str, str]) -> dict[str, object]:
        return {"subcommand": "call", "server": "time", "tool": tool, "parameters": parameters}

    model = ScriptedModel(
        [
            tool_call("mcp", call("get_current_time", {"timezone": "UTC"})),
            tool_call(
                "mcp",
                call(
                    "convert_time",
                    {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
                ),
            ),
            text("It is noon somewhere."),
        ]
    )
    before = children()
    events = await run_events(project, "clock", "What time is it?", model=model)

    system = model.requests[0][0][0].content
    assert "- time: " in system and "get_current_time" in system
    now, converted = [e for e in events if isinstance(e, ToolResultEvent)]
    assert not now.is_error
    assert json.loads(now.content)["timezone"] == "UTC"
    assert converted.is_error
    assert "time conversions are not allowed here" in converted.content
    blocked = next(e for e in events if isinstance(e, HookEvent) and e.decision == "block")
    assert blocked.tool_name == "time__convert_time"
    assert isinstance(events[-1], RunFinished) and events[-1].status == "ok"
    assert children() - before == set()  # the run's own services stopped the server


def test_fim_run_leaves_no_server_processes_behind(tmp_path):
    marker = f"fim-orphan-check-{uuid.uuid4().hex}"
    servers = {"demo": {"command": sys.executable, "args": [str(DEMO), "--tag", marker]}}
    agent = """
        instructions: Echo.
        model: scripted:echo.yaml
        mcp: [demo]
    """
    root = write_project(tmp_path, servers, {"echo": agent})
    call = {"subcommand": "call", "server": "demo", "tool": "pid", "parameters": {}}
    script = [{"tool_call": {"name": "mcp", "arguments": call}}, {"text": "done"}]
    (root / "echo.yaml").write_text(json.dumps(script))
    # in this process: a server the run did not stop would still be alive (not orphaned)
    run = run_fim("--project", str(root), "run", "echo", "hi", "--json", timeout=120)
    assert run.returncode == 0, run.stderr
    results = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    pid = int(next(e for e in results if e["type"] == "tool_result")["content"])
    assert pid > 0
    assert processes_with(marker) == []


# --------------------------------------------------------------------------- CLI / validate


@pytest.fixture(scope="module")
def small_project(tmp_path_factory: pytest.TempPathFactory, http_url: str) -> Path:
    servers = {
        "big": {"url": f"{http_url}/mcp", "description": "Big"},
        "broken": {"command": sys.executable, "args": ["-c", BROKEN]},
    }
    return write_project(tmp_path_factory.mktemp("small"), servers, {})


def cli() -> typer.Typer:
    from fim.commands import mcp

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """fim"""

    mcp.register(app)
    return app


def test_fim_mcp_list_shows_status_and_tool_counts(small_project):
    result = CliRunner().invoke(cli(), ["mcp", "list", "--project", str(small_project)])
    assert result.exit_code == 1, result.output
    big, broken = result.output.splitlines()
    assert big.split()[:5] == ["big", "streamable_http", "ready", "120", "tools"]
    assert broken.split()[:3] == ["broken", "stdio", "failed"]
    assert "DOCS_TOKEN is not set" in broken


def test_fim_mcp_tools_lists_one_servers_tools(small_project):
    result = CliRunner().invoke(cli(), ["mcp", "tools", "big", "--project", str(small_project)])
    assert result.exit_code == 0, result.output
    assert "big__add  Add two integers" in result.output.splitlines()
    missing = CliRunner().invoke(cli(), ["mcp", "tools", "nope", "--project", str(small_project)])
    assert missing.exit_code == 1
    assert "no MCP server named 'nope'" in missing.output


@shared_loop
async def test_validate_live_reports_servers_that_fail_to_start(small_project):
    results = await check_live(compile_project(small_project))
    assert results[0] == ("big", True, "120 tools")
    name, ok, detail = results[1]
    assert (name, ok) == ("broken", False)
    assert "exited before completing the MCP handshake" in detail
    assert "DOCS_TOKEN is not set" in detail
