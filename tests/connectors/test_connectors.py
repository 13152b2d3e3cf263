"""Showing connectors to the model: progressive meta-tools vs legacy tools, mode precedence,
and hooks seeing the real action behind a meta-tool call."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import fim.run.agent
import fim.run.plan
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, DatabaseConnector, HttpConnector, Project
from fim.connectors.provider import effective_tool_name, provide, resolve_call_metadata
from fim.errors import RunError
from fim.events import HookEvent, RunFinished
from fim.run.services import RunContext, Services
from fim.testing.connectors import serve_test_api
from fim.tools.registry import ToolRegistry


@pytest.fixture(scope="module")
def api():
    with serve_test_api() as served:
        yield served


@pytest.fixture
async def services():
    svc = Services(providers=CAPABILITIES)
    yield svc
    await svc.aclose()


@pytest.fixture(autouse=True)
def no_env_modes(monkeypatch):
    monkeypatch.delenv("FIM_CONNECTOR_TOOL_MODE", raising=False)
    monkeypatch.delenv("FIM_DATABASE_TOOL_MODE", raising=False)


def crm(base_url: str) -> HttpConnector:
    return HttpConnector.model_validate(
        {
            "kind": "http",
            "description": "CRM system",
            "base_url": base_url,
            "actions": {
                "get_contact": {
                    "description": "Fetch a contact by id",
                    "path": "/echo/contacts/{id}",
                    "parameters": {
                        "type": "object",
                        "properties": {"id": {"type": "string"}},
                        "required": ["id"],
                    },
                },
                "create_lead": {
                    "method": "POST",
                    "path": "/flaky/lead",
                    "access": "write",
                    "requires_confirmation": True,
                    "parameters": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                    },
                },
            },
        }
    )


def shop_db(root: Path) -> DatabaseConnector:
    (root / "data").mkdir(exist_ok=True)
    with sqlite3.connect(root / "data" / "shop.db") as conn:
        conn.executescript(
            "CREATE TABLE IF NOT EXISTS customers (id INTEGER PRIMARY KEY, name TEXT);"
            "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer_id INTEGER "
            "REFERENCES customers(id), amount REAL);"
            "INSERT OR IGNORE INTO customers VALUES (1, 'Ann');"
        )
    conn.close()
    return DatabaseConnector(
        kind="database", description="Shop orders", url="sqlite:///data/shop.db"
    )


def snapshot(
    tmp_path: Path,
    base_url: str,
    *,
    agent: dict[str, Any] | None = None,
    project: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Snapshot:
    decl = AgentDecl.model_validate(
        {"name": "support", "connectors": ["crm", "shop_db"], **(agent or {})}
    )
    return Snapshot(
        root=tmp_path,
        project=Project.model_validate(project or {}),
        agents={"support": decl},
        connectors={"crm": crm(base_url), "shop_db": shop_db(tmp_path), **(extra or {})},
    )


def context(snap: Snapshot, services: Services) -> RunContext:
    return RunContext(snapshot=snap, agent=snap.agents["support"], services=services)


# ------------------------------------------------------------------ provisioning


async def test_progressive_mode_gives_two_meta_tools_and_prompt_stubs(tmp_path, api, services):
    provision = await provide(context(snapshot(tmp_path, api[0]), services))
    assert [t.name for t in provision.tools] == ["connector", "database"]
    assert provision.pinned == ["connector", "database"]
    assert provision.hidden == 2 + 3, "two HTTP actions, three database actions"
    assert "- crm: CRM system — actions: get_contact, create_lead" in provision.prompt
    assert "- shop_db: Shop orders — 2 tables: customers, orders" in provision.prompt
    connector = provision.tools[0]
    assert connector.parameters["properties"]["connector"]["enum"] == ["crm"]
    assert connector.metadata["meta"] == "connector"


async def test_legacy_mode_gives_one_tool_per_action_and_three_per_database(
    tmp_path, api, services
):
    snap = snapshot(
        tmp_path,
        api[0],
        agent={"tool_modes": {"connectors": "legacy", "databases": "legacy"}},
    )
    provision = await provide(context(snap, services))
    assert [t.name for t in provision.tools] == [
        "crm__get_contact",
        "crm__create_lead",
        "shop_db__list_tables",
        "shop_db__describe",
        "shop_db__query",
    ]
    assert provision.prompt is None
    assert provision.tools[1].metadata["requires_confirmation"] is True


@pytest.mark.parametrize(
    ("agent_mode", "env_mode", "project_mode", "expected"),
    [
        (None, None, None, "connector"),
        (None, None, "legacy", "crm__get_contact"),
        (None, "progressive", "legacy", "connector"),
        (None, "legacy", "progressive", "crm__get_contact"),
        ("progressive", "legacy", "legacy", "connector"),
        ("legacy", "progressive", "progressive", "crm__get_contact"),
    ],
)
async def test_mode_precedence_agent_then_env_then_project_then_default(
    tmp_path, api, services, monkeypatch, agent_mode, env_mode, project_mode, expected
):
    if env_mode:
        monkeypatch.setenv("FIM_CONNECTOR_TOOL_MODE", env_mode)
    snap = snapshot(
        tmp_path,
        api[0],
        agent={"tool_modes": {"connectors": agent_mode}} if agent_mode else {},
        project={"tool_modes": {"connectors": project_mode}} if project_mode else {},
    )
    names = [t.name for t in (await provide(context(snap, services))).tools]
    assert names[0] == expected
    assert names[-1] == "database"  # the database mode is resolved on its own


async def test_the_database_mode_has_its_own_env_variable(tmp_path, api, services, monkeypatch):
    monkeypatch.setenv("FIM_DATABASE_TOOL_MODE", "legacy")
    names = [t.name for t in (await provide(context(snapshot(tmp_path, api[0]), services))).tools]
    assert names == ["connector", "shop_db__list_tables", "shop_db__describe", "shop_db__query"]


async def test_a_database_that_is_down_does_not_fail_the_run(tmp_path, api, services):
    down = DatabaseConnector(kind="database", url="postgresql://fim:pw@127.0.0.1:1/nowhere")
    snap = snapshot(
        tmp_path, api[0], agent={"connectors": ["warehouse"]}, extra={"warehouse": down}
    )
    provision = await provide(context(snap, services))
    assert "- warehouse: tables unknown (connection failed)" in provision.prompt


async def test_an_unknown_connector_is_a_run_error_naming_the_known_ones(tmp_path, api, services):
    snap = snapshot(tmp_path, api[0], agent={"connectors": ["erp"]})
    with pytest.raises(RunError, match="unknown connector 'erp'") as err:
        await provide(context(snap, services))
    assert "crm, shop_db" in str(err.value)


async def test_no_connectors_no_provision(tmp_path, api, services):
    snap = snapshot(tmp_path, api[0], agent={"connectors": []})
    assert await provide(context(snap, services)) is None


# ------------------------------------------------------------------ meta-tools


async def progressive(tmp_path, api, services) -> ToolRegistry:
    return ToolRegistry((await provide(context(snapshot(tmp_path, api[0]), services))).tools)


async def test_discover_lists_actions_with_their_schemas(tmp_path, api, services):
    registry = await progressive(tmp_path, api, services)
    result = await registry.call("connector", {"subcommand": "discover", "connector": "crm"})
    assert "- get_contact (GET /echo/contacts/{id}; read): Fetch a contact by id" in result.content
    assert "- create_lead (POST /flaky/lead; write, requires confirmation)" in result.content
    assert '"required": ["id"]' in result.content


async def test_execute_runs_the_action_against_the_service(tmp_path, api, services):
    registry = await progressive(tmp_path, api, services)
    result = await registry.call(
        "connector",
        {
            "subcommand": "execute",
            "connector": "crm",
            "action": "get_contact",
            "parameters": {"id": "42"},
        },
    )
    assert json.loads(result.content)["raw_path"] == "/echo/contacts/42"


async def test_execute_of_an_unknown_action_lists_the_valid_ones(tmp_path, api, services):
    registry = await progressive(tmp_path, api, services)
    result = await registry.call(
        "connector", {"subcommand": "execute", "connector": "crm", "action": "get_contacts"}
    )
    assert result.is_error
    assert "has no action 'get_contacts'. Valid actions: get_contact, create_lead" in result.content


async def test_execute_validates_parameters_against_the_action_schema(tmp_path, api, services):
    registry = await progressive(tmp_path, api, services)
    result = await registry.call(
        "connector",
        {"subcommand": "execute", "connector": "crm", "action": "get_contact", "parameters": {}},
    )
    assert result.is_error
    assert "'id' is a required property" in result.content


async def test_an_unknown_connector_is_refused_by_the_enum(tmp_path, api, services):
    registry = await progressive(tmp_path, api, services)
    result = await registry.call("connector", {"subcommand": "discover", "connector": "erp"})
    assert result.is_error and "'crm'" in result.content


async def test_the_database_meta_tool_lists_discovers_and_queries(tmp_path, api, services):
    registry = await progressive(tmp_path, api, services)
    base = {"database": "shop_db"}
    listed = await registry.call("database", {**base, "subcommand": "list_tables"})
    assert listed.content == "2 tables: customers, orders"
    described = await registry.call(
        "database", {**base, "subcommand": "discover", "table": "orders"}
    )
    assert "- customer_id INTEGER NULL -> customers.id" in described.content
    queried = await registry.call(
        "database",
        {
            **base,
            "subcommand": "query",
            "sql": "SELECT name FROM customers WHERE id = :i",
            "params": {"i": 1},
        },
    )
    assert queried.content == "name\nAnn\n(1 row)"
    refused = await registry.call(
        "database", {**base, "subcommand": "query", "sql": "DELETE FROM customers"}
    )
    assert refused.is_error and "query refused" in refused.content


async def test_hooks_see_the_real_action_behind_a_meta_call(tmp_path, api, services):
    connector, database = (await provide(context(snapshot(tmp_path, api[0]), services))).tools
    args = {"subcommand": "execute", "connector": "crm", "action": "create_lead"}
    assert effective_tool_name(connector, args) == "crm__create_lead"
    meta = resolve_call_metadata(connector, args)
    assert meta["access"] == "write" and meta["requires_confirmation"] is True
    assert (meta["connector"], meta["action"], meta["method"]) == ("crm", "create_lead", "POST")
    assert "call_view" not in meta
    discover = {"subcommand": "discover", "connector": "crm"}
    assert resolve_call_metadata(connector, discover)["access"] == "read"
    query = {"subcommand": "query", "database": "shop_db", "sql": "SELECT 1"}
    assert effective_tool_name(database, query) == "shop_db__query"
    assert resolve_call_metadata(database, query)["sql"] == "SELECT 1"
    assert effective_tool_name(database, {**query, "subcommand": "discover"}) == (
        "shop_db__describe"
    )


async def test_a_read_only_agent_is_stopped_by_its_hook_before_the_meta_call_runs(
    tmp_path, api, services, monkeypatch
):
    """End to end: the engine shows hooks `crm__create_lead` with access=write."""
    from fim.llm.scripted import ScriptedModel, text, tool_call

    url, _, state = api
    snap = snapshot(tmp_path, url, agent={"read_only": True, "hooks": [{"use": "readonly_guard"}]})
    call = {
        "subcommand": "execute",
        "connector": "crm",
        "action": "create_lead",
        "parameters": {"name": "Zoë"},
    }
    model = ScriptedModel([tool_call("connector", call), text("I cannot create leads.")])
    events = [
        e
        async for e in fim.run.agent.run_agent(
            snap, "support", "add lead Zoë", services=services, model=model
        )
    ]
    blocks = [e for e in events if isinstance(e, HookEvent) and e.decision == "block"]
    assert [b.tool_name for b in blocks] == ["crm__create_lead"]
    assert "write action" in blocks[0].reason
    assert "lead" not in state.hits
    assert isinstance(events[-1], RunFinished)
