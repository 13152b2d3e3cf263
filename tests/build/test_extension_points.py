"""Each kind of extension is one new file, and a file missing one of its pieces is refused
when it is imported (naming the piece), not when a run first reaches it.

The files are written into a temporary folder and imported the way fim imports its own:
node types and model backends by importing their module (the class registers itself),
builtin tools and hooks through their package's `__path__` (the folder listing is the
registry), CLI command areas through `build_app`, HTTP route areas through `create_app`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent
from types import ModuleType

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from fim.build.checks import Checker
from fim.build.compile import compile_project, load_project
from fim.build.workflow_checks import _NodeChecks
from fim.capabilities import CAPABILITIES
from fim.cli import build_app
from fim.config.schema import WorkflowDecl
from fim.config.schema.workflow import node_union
from fim.errors import RunError
from fim.hooks import builtin as builtin_hooks
from fim.hooks.base import HookBuildError
from fim.run.services import Services
from fim.tools import builtin as builtin_tools
from fim.workflows.graph import mermaid
from fim.workflows.node_types import NODE_TYPES, NodeType
from fim.workflows.nodes import NodeContext

# --------------------------------------------------------------------------- node types

ECHO_NODE = """
from __future__ import annotations

from typing import Any, ClassVar, Literal

from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType


class EchoNode(NodeType):
    type: Literal["echo_ext"]
    text: str

    shape: ClassVar[str] = "[[{}]]"
    template_fields: ClassVar[tuple[str, ...]] = ("text",)

    async def execute(self, ctx: NodeRuntime) -> Any:
        return ctx.render_text(self.text)

    def check_refs(self, at: NodeChecks) -> None:
        if not at.ref(("agent",), "agent", self.text):
            return

    def graph_label(self) -> str:
        return f"echo {len(self.text)} chars"
"""


def _import_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@pytest.fixture
def node_file(tmp_path: Path) -> Iterator[object]:
    """Write a node-type module and import it; the registry is restored afterwards."""
    before = dict(NODE_TYPES)
    written: list[str] = []

    def write(source: str, stem: str) -> ModuleType:
        path = tmp_path / f"{stem}.py"
        path.write_text(dedent(source))
        name = f"_fim_ext_{stem}"
        written.append(name)
        return _import_file(path, name)

    yield write
    NODE_TYPES.clear()
    NODE_TYPES.update(before)
    for name in written:
        sys.modules.pop(name, None)


PROJECT = {
    "fim.yaml": 'name: ext\nstate: "sqlite:///.fim/state.db"\n'
    'models: {general: "scripted:s/general.yaml"}\n',
    "s/general.yaml": "- text: unused\n",
    "agents/helper.yaml": "name: helper\ndescription: helps\ninstructions: help\n",
    "workflows/w.yaml": "nodes:\n  a:\n    type: tool\n    tool: calculator\n"
    "    args: {expression: '1+1'}\n",
}


def _project(root: Path) -> Path:
    for name, text in PROJECT.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


async def test_a_node_type_file_registers_schema_executor_check_and_label(
    node_file, tmp_path: Path
) -> None:
    module = node_file(ECHO_NODE, "echo")
    echo = module.EchoNode
    assert NODE_TYPES["echo_ext"] is echo

    # schema: the union the YAML schema is built from validates it, by its `type`
    union = TypeAdapter(node_union(NODE_TYPES.values()))
    node = union.validate_python({"type": "echo_ext", "text": "hi {{ inputs.who }}"})
    assert type(node) is echo and node.needs == [] and node.retry.count == 0
    assert "echo_ext" in union.json_schema()["discriminator"]["mapping"]

    # graph label and shape
    decl = WorkflowDecl.model_construct(nodes={"greet": node}, inputs={}, outputs={})
    assert 'n_greet[["greet<br/>echo 19 chars"]]' in mermaid(decl)

    # executor, with the real NodeContext of a compiled project
    root = _project(tmp_path / "p")
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        ctx = NodeContext(snapshot, services, "w", "run-1", "greet", {"inputs": {"who": "ada"}})
        assert await node.execute(ctx) == "hi ada"
    finally:
        await services.aclose()

    # compile-time check: its problems point into the workflow file
    decls = load_project(root)
    checker = Checker(decls)
    entry = decls.entries["workflow"]["w"]
    echo(type="echo_ext", text="helper").check_refs(_NodeChecks(checker, entry, ("nodes", "a")))
    assert decls.problems == []
    echo(type="echo_ext", text="nobody").check_refs(_NodeChecks(checker, entry, ("nodes", "a")))
    assert [p.message for p in decls.problems] == ["unknown agent 'nobody'"]
    assert decls.problems[0].path.endswith("w.yaml")


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("    def graph_label", r"\('echo_ext'\) has no graph_label"),
        ("    async def execute", r"\('echo_ext'\) has no execute"),
        ("    def check_refs", r"\('echo_ext'\) has no check_refs"),
    ],
)
def test_a_node_type_missing_a_piece_fails_at_import(node_file, drop: str, message: str) -> None:
    lines = ECHO_NODE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(drop))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("    def")), len(lines)
    )
    source = "\n".join(lines[:start] + lines[end:])
    with pytest.raises(TypeError, match=message):
        node_file(source, "half")
    assert "echo_ext" not in NODE_TYPES


def test_a_node_type_needs_one_literal_name_of_its_own(node_file) -> None:
    with pytest.raises(TypeError, match=r"must declare `type: Literal\['<name>'\]`"):
        node_file(ECHO_NODE.replace('Literal["echo_ext"]', "str"), "untyped")
    with pytest.raises(TypeError, match="type 'llm' is already"):
        node_file(ECHO_NODE.replace('"echo_ext"', '"llm"'), "taken")
    assert NODE_TYPES["llm"].__module__ == "fim.workflows.node_types.llm"


def test_every_shipped_node_type_is_in_the_schema() -> None:
    nodes = WorkflowDecl.model_json_schema()["properties"]["nodes"]["additionalProperties"]
    assert sorted(nodes["discriminator"]["mapping"]) == sorted(NODE_TYPES)
    assert all(issubclass(cls, NodeType) for cls in NODE_TYPES.values())


USES_NODE = (
    ECHO_NODE.replace("NodeType\n", "NodeType, NodeUses\n")
    + """
    def uses(self) -> NodeUses:
        return NodeUses(
            tools=("calculator", "shop__refund"),
            mcp=(("files", "read"),),
            models=("remote",),
            agents=("helper",),
        )
"""
)


def test_what_a_node_type_uses_is_read_by_every_look_ahead(
    node_file, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`uses()` is all fim validate's hook targets, the preflight and eval's replay skip
    learn about a node: a new node type needs no edit in any of them."""
    from dataclasses import replace

    from fim.config.schema import ModelSettings
    from fim.eval.runner import EvalRunner
    from fim.hooks.targets import hook_targets
    from fim.run.preflight import workflow_problems

    module = node_file(USES_NODE, "uses")
    node = module.EchoNode(type="echo_ext", text="x")
    snapshot = compile_project(_project(tmp_path / "p"))
    decl = WorkflowDecl.model_construct(nodes={"n": node}, inputs={}, outputs={})
    helper = snapshot.agents["helper"].model_copy(update={"workflows": ["w"]})
    remote = ModelSettings(model="anthropic/claude-x")
    snapshot = replace(
        snapshot,
        workflows={"w": decl},
        agents={"helper": helper},
        models={**snapshot.models, "remote": remote},
    )
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    targets = hook_targets(snapshot, helper)
    assert {"calculator", "shop__refund", "files__read", "mcp__files__read"} <= set(targets.names)
    problems = [p.message for p in workflow_problems(snapshot, decl)]
    assert problems == ["node 'n': missing API key for anthropic/claude-x"]
    suite = type("Suite", (), {"agent": None, "workflow": "w"})()
    assert EvalRunner(snapshot)._live_model(suite) == "anthropic/claude-x"


# --------------------------------------------------------------------------- builtin tools


@pytest.fixture
def extra_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Add a folder to a builtin package's `__path__`, as if its files were dropped there."""
    added: list[str] = []

    def add(package: ModuleType, files: dict[str, str]) -> None:
        folder = tmp_path / package.__name__.replace(".", "_")
        folder.mkdir(exist_ok=True)
        for stem, source in files.items():
            (folder / f"{stem}.py").write_text(dedent(source))
            added.append(f"{package.__name__}.{stem}")
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])

    yield add
    for name in added:
        sys.modules.pop(name, None)
        builtin_tools._CHECKED.discard(name)


TOOL_OK = """
from fim.tools.base import FunctionTool

async def _shout(text: str) -> str:
    return text.upper()

TOOL = FunctionTool(
    "shout_ext", "Upper-case a text.",
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    _shout, category="text",
)
"""


async def test_a_builtin_tool_file_is_discovered_and_served(extra_folder) -> None:
    extra_folder(builtin_tools, {"shout_ext": TOOL_OK})
    assert "shout_ext" in builtin_tools.names()
    assert "shout_ext" in builtin_tools.categories()["text"]
    tool = builtin_tools.load("shout_ext")
    assert await tool.run(text="hi") == "HI"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("X = 1\n", "defines neither TOOL nor make"),
        ("def make(ctx):\n    return None\n", "defines make\\(ctx\\) but no CATEGORY"),
        (TOOL_OK.replace('"shout_ext", "Upper', '"other", "Upper'), "named 'other'"),
        (TOOL_OK.replace('{"type": "object", "properties"', '{"properties"'), "no parameters"),
    ],
    ids=["nothing", "make-without-category", "misnamed", "no-schema"],
)
def test_a_builtin_tool_missing_a_piece_is_refused_on_import(
    extra_folder, source: str, message: str
) -> None:
    extra_folder(builtin_tools, {"shout_ext": source})
    with pytest.raises(RunError, match=message):
        builtin_tools.category("shout_ext")
    with pytest.raises(RunError, match=message):  # and every later use, not only the first
        builtin_tools.load("shout_ext")


# --------------------------------------------------------------------------- builtin hooks

HOOK_OK = """
from fim.hooks.base import PreToolUseHook
from fim.types import HookResult

class Deny(PreToolUseHook):
    async def __call__(self, context):
        return self.block("denied by deny_ext")

HOOK = Deny
"""


def test_a_builtin_hook_file_is_discovered_and_served(extra_folder) -> None:
    extra_folder(builtin_hooks, {"deny_ext": HOOK_OK})
    assert "deny_ext" in builtin_hooks.names()
    hook_class = builtin_hooks.load("deny_ext")
    assert hook_class.__name__ == "Deny" and hook_class().points == ("PreToolUse",)


def test_a_builtin_hook_without_its_class_is_refused_on_load(extra_folder) -> None:
    extra_folder(builtin_hooks, {"deny_ext": HOOK_OK.replace("HOOK = Deny", "")})
    with pytest.raises(HookBuildError, match="builtin hook module 'deny_ext' defines no HOOK"):
        builtin_hooks.load("deny_ext")


# --------------------------------------------------------------------------- CLI areas

COMMANDS_OK = """
import typer

def register(app: typer.Typer) -> None:
    @app.command("hello-ext")
    def hello(name: str = "world") -> None:
        typer.echo(f"hello {name}")
"""


def test_a_command_area_file_is_registered(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "fim_ext_commands.py").write_text(dedent(COMMANDS_OK))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fim_ext_commands", raising=False)
    app = build_app(["fim.commands.project", "fim_ext_commands"])
    result = CliRunner().invoke(app, ["hello-ext", "--name", "ada"])
    assert result.exit_code == 0, result.output
    assert result.output == "hello ada\n"
    sys.modules.pop("fim_ext_commands", None)


def test_a_command_area_without_register_fails_when_the_app_is_built(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "fim_ext_nothing.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match="fim_ext_nothing has no register"):
        build_app(["fim_ext_nothing"])
    sys.modules.pop("fim_ext_nothing", None)
    with pytest.raises(ModuleNotFoundError):  # a missing area is an error, never skipped
        build_app(["fim_ext_not_there"])


# --------------------------------------------------------------------------- model backends

BACKEND_OK = """
from __future__ import annotations

from fim.llm.backend import Backend
from fim.llm.scripted import ScriptedModel
from fim.llm.script import text


class EchoBackend(Backend):
    name = "echo_ext"
    schemes = ("echo_ext:",)

    @classmethod
    def build(cls, settings, root):
        return ScriptedModel([text(settings.model.removeprefix("echo_ext:"))], name=settings.model)
"""


@pytest.fixture
def backend_file(tmp_path: Path) -> Iterator[object]:
    """Write a backend module and import it; the registry is restored afterwards."""
    from fim.llm import backends

    before = dict(backends())
    written: list[str] = []

    def write(source: str, stem: str) -> ModuleType:
        path = tmp_path / f"{stem}.py"
        path.write_text(dedent(source))
        written.append(f"_fim_backend_{stem}")
        return _import_file(path, written[-1])

    yield write
    backends().clear()
    backends().update(before)
    for name in written:
        sys.modules.pop(name, None)


async def test_a_backend_file_is_chosen_for_its_scheme_or_claim(backend_file) -> None:
    from fim.config.schema import ModelSettings
    from fim.llm import backend_of, make_model
    from fim.types import Message

    backend_file(BACKEND_OK, "echo")
    model = make_model(ModelSettings(model="echo_ext:hello"))
    reply = await model.complete([Message(role="user", content="hi")])
    assert reply.message.content == "hello"
    assert backend_of(ModelSettings(model="openai/gpt-4o-mini")) == "openai"

    claiming = BACKEND_OK.replace('schemes = ("echo_ext:",)', "").replace(
        "    @classmethod\n    def build",
        "    @classmethod\n    def claims(cls, settings):\n"
        "        return settings.model.startswith('acme/')\n\n"
        "    @classmethod\n    def build",
    )
    backend_file(claiming.replace("echo_ext", "acme_ext"), "acme")
    assert backend_of(ModelSettings(model="acme/x")) == "acme_ext"
    assert backend_of(ModelSettings(model="anthropic/claude-x")) == "litellm"
    forced = ModelSettings(model="acme/x", extra={"backend": "litellm"})
    assert backend_of(forced) == "litellm"
    with pytest.raises(RunError) as info:
        backend_of(ModelSettings(model="acme/x", extra={"backend": "nope"}))
    assert "`acme_ext`" in (info.value.hint or "") and "`scripted`" not in (info.value.hint or "")


def test_preflight_asks_the_chosen_backend_for_its_key_and_endpoint(backend_file) -> None:
    """Key rules and local endpoints come from the backend class (the defaults: litellm's
    provider keys and local ports), not from a branch on a backend's name."""
    from fim.config.schema import ModelSettings
    from fim.run.preflight import key_problem, local_endpoint

    backend_file(
        BACKEND_OK.replace(
            "    @classmethod\n    def build",
            "    @classmethod\n    def endpoint(cls, settings):\n"
            "        return 'http://127.0.0.1:7777/v1'\n\n"
            "    @classmethod\n    def build",
        ),
        "echo",
    )
    echo = ModelSettings(model="echo_ext:hi")
    assert key_problem(echo) is None
    assert local_endpoint(echo) == "http://127.0.0.1:7777/v1"
    assert local_endpoint(ModelSettings(model="ollama/qwen2.5")) == "http://localhost:11434/v1"
    assert local_endpoint(ModelSettings(model="scripted:x.yaml")) is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace('name = "echo_ext"', ""), r"EchoBackend has no name"),
        (lambda s: s.replace("def build", "def built"), r"\('echo_ext'\) has no build"),
        (
            lambda s: s.replace('schemes = ("echo_ext:",)', ""),
            r"has no way to be chosen \(schemes, claims\(settings\) or fallback\)",
        ),
        (lambda s: s.replace('"echo_ext"', '"openai"'), "backend 'openai' is already"),
        (
            lambda s: s.replace('schemes = ("echo_ext:",)', "fallback = True"),
            "'litellm' is already the fallback backend",
        ),
    ],
    ids=["no-name", "no-build", "not-chosen", "taken", "second-fallback"],
)
def test_a_backend_missing_a_piece_fails_at_import(backend_file, edit, message: str) -> None:
    from fim.llm import backends

    with pytest.raises(TypeError, match=message):
        backend_file(edit(BACKEND_OK), "half")
    assert "echo_ext" not in backends()
    assert backends()["openai"].__module__ == "fim.llm.openai_compat"


# --------------------------------------------------------------------------- HTTP route areas

AREA_OK = """
from __future__ import annotations

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fim.server.area import Area, Op, get


class Pong(BaseModel):
    agents: int


def handlers(api):
    async def ping(request: Request) -> Response:
        return JSONResponse({"agents": len(api.holder.current.agents)})

    return {"ping": ping}


AREA = Area(
    "ping_ext",
    (get("/v1/ping-ext", "ping", Op("Count the agents", "status", Pong)),),
    handlers,
)
"""


def test_a_route_area_file_is_served_and_documented(tmp_path: Path, monkeypatch) -> None:
    from starlette.testclient import TestClient

    from fim.build.reload import SnapshotHolder
    from fim.server.app import AREAS, create_app

    (tmp_path / "fim_ext_ping.py").write_text(dedent(AREA_OK))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fim_ext_ping", raising=False)
    snapshot = compile_project(_project(tmp_path / "p"))
    app = create_app(SnapshotHolder(snapshot), areas=[*AREAS, "fim_ext_ping"])
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/v1/ping-ext").json() == {"agents": 1}
        doc = client.get("/openapi.json").json()
    operation = doc["paths"]["/v1/ping-ext"]["get"]
    assert operation["summary"] == "Count the agents" and operation["tags"] == ["status"]
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/Pong"}
    assert doc["components"]["schemas"]["Pong"]["properties"]["agents"]["type"] == "integer"
    sys.modules.pop("fim_ext_ping", None)


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (
            lambda s: s.replace('Op("Count the agents", "status", Pong)', "None"),
            TypeError,
            r"route area 'ping_ext': GET /v1/ping-ext has no OpenAPI operation",
        ),
        (
            lambda s: s.replace(
                'get("/v1/ping-ext", "ping", Op("Count the agents", "status", Pong))',
                'Endpoint("/v1/ping-ext", "ping")',
            ).replace("import Area, Op, get", "import Area, Endpoint, Op"),
            TypeError,
            r"GET /v1/ping-ext has no OpenAPI operation",
        ),
    ],
    ids=["op-none", "no-ops"],
)
def test_a_route_without_its_operation_fails_at_import(
    tmp_path: Path, edit, error: type[Exception], message: str
) -> None:
    path = tmp_path / "half.py"
    path.write_text(dedent(edit(AREA_OK)))
    with pytest.raises(error, match=message):
        _import_file(path, "_fim_ext_half_area")
    assert "_fim_ext_half_area" not in sys.modules


def test_an_area_module_without_area_or_handler_fails_when_the_app_is_built(
    tmp_path: Path, monkeypatch
) -> None:
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    (tmp_path / "fim_ext_noarea.py").write_text("X = 1\n")
    (tmp_path / "fim_ext_nohandler.py").write_text(
        dedent(AREA_OK).replace('return {"ping": ping}', "return {}")
    )
    (tmp_path / "fim_ext_twice.py").write_text(
        dedent(AREA_OK).replace("/v1/ping-ext", "/v1/agents")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    holder = SnapshotHolder(compile_project(_project(tmp_path / "p")))
    cases = {
        "fim_ext_noarea": "fim_ext_noarea has no AREA",
        "fim_ext_nohandler": "route area 'ping_ext' has no handler ping",
        "fim_ext_twice": "GET /v1/agents is already served",
    }
    try:
        for module, message in cases.items():
            with pytest.raises(TypeError, match=message):
                create_app(holder, areas=["fim.server.areas.agents", module])
    finally:
        for module in cases:
            sys.modules.pop(module, None)


async def test_an_agent_without_connectors_or_servers_loads_neither_area(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run asks every capability area; the connector and MCP areas answer an agent
    that declares none without importing their machinery (HTTP clients, database
    workers, the MCP client), which every `fim run` and `fim eval` paid at start-up."""
    import fim.connectors
    import fim.mcp
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl, Project
    from fim.run.services import RunContext, Services

    for name in ("fim.connectors.provider", "fim.mcp.provider"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    agent = AgentDecl(name="plain", model="general")
    snapshot = Snapshot(root=tmp_path, project=Project(name="p"), agents={"plain": agent})
    ctx = RunContext(snapshot=snapshot, agent=agent, services=Services(root=tmp_path))
    assert await fim.connectors.provide(ctx) is None
    assert await fim.mcp.provide(ctx) is None
    assert "fim.connectors.provider" not in sys.modules
    assert "fim.mcp.provider" not in sys.modules
