"""HTTP connectors against a real HTTP service on 127.0.0.1 (fim.testing.connectors)."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors import http_fetch as http_mod
from fim.connectors.http import get_client
from fim.connectors.http_tool import action_tool
from fim.run.services import Services
from fim.testing.connectors import serve_test_api
from fim.tools.registry import ToolRegistry


@pytest.fixture(scope="module")
def api():
    with serve_test_api() as served:
        yield served


@pytest.fixture
async def services():
    svc = Services()
    yield svc
    await svc.aclose()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(http_mod, "RETRY_BACKOFF", 0.01)


def connector(base_url: str, actions: dict[str, Any], **fields: Any) -> HttpConnector:
    return HttpConnector.model_validate(
        {"kind": "http", "base_url": base_url, "actions": actions, **fields}
    )


async def call(services, decl: HttpConnector, action: str, args: dict[str, Any], name="crm"):
    """Run an action through the registry, as the engine does (arguments validated first)."""
    client = get_client(services, name, decl)
    registry = ToolRegistry([action_tool(client, a) for a in decl.actions])
    return await registry.call(f"{name}__{action}", args)


# ------------------------------------------------------------------ auth


@pytest.mark.parametrize(
    ("scheme", "auth"),
    [
        ("bearer", lambda c: {"type": "bearer", "token": c.token}),
        ("header", lambda c: {"type": "api_key", "key": c.api_key, "name": c.api_key_name}),
        (
            "query",
            lambda c: {
                "type": "api_key",
                "key": c.api_key,
                "name": c.api_key_name,
                "location": "query",
            },
        ),
        ("basic", lambda c: {"type": "basic", "username": c.username, "password": c.password}),
    ],
)
async def test_each_auth_type_is_injected_and_the_secret_never_shown(api, services, scheme, auth):
    url, creds, _ = api
    decl = connector(url, {"check": {"path": f"/secure/{scheme}"}}, auth=auth(creds))
    result = await call(services, decl, "check", {})
    assert not result.is_error, result.content
    assert json.loads(result.content)["ok"] is True
    # The service echoes the credential; the observation masks it.
    for secret in (creds.token, creds.api_key, creds.password):
        assert secret not in result.content
    assert "***" in result.content


async def test_wrong_credentials_are_an_http_401_observation(api, services):
    url, _, _ = api
    decl = connector(
        url, {"check": {"path": "/secure/bearer"}}, auth={"type": "bearer", "token": "nope-123"}
    )
    result = await call(services, decl, "check", {})
    assert result.is_error
    assert result.content.startswith("[HTTP 401]")
    assert "credentials" in result.content
    assert "nope-123" not in result.content


async def test_snapshot_secrets_are_masked_too(api, services):
    url, _, _ = api
    decl = connector(url, {"echo": {"path": "/echo/x", "headers": {"X-Tenant": "acme-secret"}}})
    client = get_client(services, "crm", decl, mask=lambda t: t.replace("acme-secret", "***"))
    result = await client.call("echo", {})
    assert "acme-secret" not in result.content
    assert json.loads(result.content)["headers"]["x-tenant"] == "***"


# ------------------------------------------------------------------ request shaping


async def test_path_params_are_url_encoded_and_the_rest_become_the_query_on_get(api, services):
    url, _, _ = api
    decl = connector(
        url,
        {
            "get_contact": {
                "path": "/echo/contacts/{id}",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "fields": {"type": "array", "items": {"type": "string"}},
                        "active": {"type": "boolean"},
                    },
                    "required": ["id"],
                },
            }
        },
    )
    result = await call(
        services, decl, "get_contact", {"id": "a b/c", "fields": ["email", "name"], "active": True}
    )
    seen = json.loads(result.content)
    assert seen["method"] == "GET"
    assert seen["raw_path"] == "/echo/contacts/a%20b%2Fc"
    assert seen["query_lists"] == {"fields": ["email", "name"], "active": ["true"]}
    assert seen["json"] is None


async def test_post_sends_a_json_body_and_declared_query_parameters(api, services):
    url, _, _ = api
    decl = connector(
        url,
        {
            "create_lead": {
                "method": "POST",
                "path": "/echo/accounts/{account}/leads",
                "query": ["dry_run"],
                "parameters": {
                    "type": "object",
                    "properties": {
                        "account": {"type": "integer"},
                        "name": {"type": "string"},
                        "tags": {"type": "array"},
                        "dry_run": {"type": "boolean"},
                    },
                    "required": ["account", "name"],
                },
            }
        },
        headers={"X-Client": "fim"},
    )
    args = {"account": 7, "name": "Zoë", "tags": ["vip"], "dry_run": False}
    seen = json.loads((await call(services, decl, "create_lead", args)).content)
    assert seen["method"] == "POST"
    assert seen["raw_path"] == "/echo/accounts/7/leads"
    assert seen["query"] == {"dry_run": "false"}
    assert seen["json"] == {"name": "Zoë", "tags": ["vip"]}
    assert seen["content_type"] == "application/json"
    assert seen["headers"]["x-client"] == "fim"


async def test_delete_sends_parameters_as_query_and_no_body(api, services):
    url, _, _ = api
    decl = connector(url, {"remove": {"method": "DELETE", "path": "/echo/leads/{id}"}})
    seen = json.loads((await call(services, decl, "remove", {"id": 3, "hard": 1})).content)
    assert (seen["method"], seen["raw_path"], seen["query"]) == (
        "DELETE",
        "/echo/leads/3",
        {"hard": "1"},
    )
    assert seen["json"] is None


async def test_arguments_are_validated_against_the_action_schema_before_any_request(api, services):
    url, _, state = api
    decl = connector(
        url,
        {
            "get": {
                "path": "/flaky/never",
                "parameters": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}},
                    "required": ["id"],
                },
            }
        },
    )
    result = await call(services, decl, "get", {"id": 5})
    assert result.is_error
    assert "invalid arguments for 'crm__get'" in result.content
    assert "never" not in state.hits


async def test_a_path_parameter_missing_from_the_arguments_is_explained(api, services):
    url, _, _ = api
    decl = connector(url, {"get": {"path": "/echo/contacts/{id}"}})
    result = await call(services, decl, "get", {})
    assert result.is_error
    assert "missing path parameter(s): id" in result.content


# ------------------------------------------------------------------ responses


@pytest.mark.parametrize(("status", "hint"), [(404, "Not found"), (422, "rejected the data")])
async def test_http_errors_become_observations_with_status_and_body(api, services, status, hint):
    url, _, _ = api
    decl = connector(url, {"get": {"path": f"/status/{status}"}}, retries=0)
    result = await call(services, decl, "get", {})
    assert result.is_error
    assert result.content.startswith(f'[HTTP {status}] {{"error": "status {status}"')
    assert hint in result.content


async def test_timeout_is_an_observation(api, services):
    url, _, _ = api
    decl = connector(url, {"slow": {"path": "/slow"}}, timeout=0.2, retries=0)
    result = await call(services, decl, "slow", {"s": 1})
    assert result.is_error
    assert "timed out after 0.2s" in result.content


async def test_large_json_arrays_keep_the_first_items_and_say_how_many_were_cut(api, services):
    url, _, _ = api
    decl = connector(url, {"list": {"path": "/items"}}, max_response_chars=2000)
    result = await call(services, decl, "list", {"n": 500})
    body, _, note = result.content.partition("\n")
    kept = json.loads(body)
    assert 0 < len(kept) < 500 and len(body) <= 2000
    assert kept[0] == {"id": 0, "name": "item 0", "tags": ["a", "b"]}
    assert note.startswith(f"... {500 - len(kept)} more items cut (500 in total")


async def test_an_array_inside_an_object_is_cut_the_same_way(api, services):
    url, _, _ = api
    decl = connector(url, {"list": {"path": "/items"}}, max_response_chars=1500)
    result = await call(services, decl, "list", {"n": 300, "wrap": 1})
    body, _, note = result.content.partition("\n")
    data = json.loads(body)
    assert data["total"] == 300
    assert note.startswith(f"... {300 - len(data['items'])} more items cut of 'items'")


async def test_large_text_is_truncated_with_a_note(api, services):
    url, _, _ = api
    decl = connector(url, {"text": {"path": "/text"}}, max_response_chars=100)
    result = await call(services, decl, "text", {"n": 100})
    assert result.content.startswith("line of text\n")
    assert result.content.endswith("more characters cut; ask for less data]")


# ------------------------------------------------------------------ retries and pooling


async def test_get_is_retried_on_503_until_it_succeeds(api, services):
    url, _, state = api
    decl = connector(url, {"get": {"path": "/flaky/get-503"}}, retries=2)
    result = await call(services, decl, "get", {"fail": 2})
    assert not result.is_error
    assert json.loads(result.content) == {"ok": True, "attempt": 3}
    assert state.hits["get-503"] == 3


async def test_post_is_never_retried(api, services):
    url, _, state = api
    decl = connector(url, {"create": {"method": "POST", "path": "/flaky/post-503"}}, retries=2)
    result = await call(services, decl, "create", {"fail": 1})
    assert result.is_error and result.content.startswith("[HTTP 503]")
    assert state.hits["post-503"] == 1


async def test_an_unreachable_service_is_an_observation_after_retries(services):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    decl = connector(f"http://127.0.0.1:{port}", {"get": {"path": "/x"}}, retries=1)
    result = await call(services, decl, "get", {})
    assert result.is_error
    assert "could not reach crm" in result.content


async def test_one_pooled_client_per_declaration_closed_with_services(api):
    url, _, _ = api
    svc = Services()
    decl = connector(url, {"get": {"path": "/echo/a"}})
    first = get_client(svc, "crm", decl)
    assert get_client(svc, "crm", decl) is first
    changed = connector(url, {"get": {"path": "/echo/a"}}, timeout=3)
    assert get_client(svc, "crm", changed) is not first
    await first.call("get", {})
    httpx_client = first.client
    await svc.aclose()
    assert httpx_client.is_closed


def test_action_tools_carry_the_metadata_hooks_need(api):
    url, _, _ = api
    decl = connector(
        url,
        {
            "create_lead": {
                "method": "POST",
                "path": "/leads",
                "access": "write",
                "requires_confirmation": True,
                "description": "Create a lead",
            }
        },
    )
    tool = action_tool(get_client(Services(), "crm", decl), "create_lead")
    assert tool.name == "crm__create_lead"
    assert tool.category == "connector"
    assert tool.description == "crm: Create a lead"
    assert tool.metadata == {
        "connector": "crm",
        "action": "create_lead",
        "access": "write",
        "requires_confirmation": True,
        "method": "POST",
        "path": "/leads",
    }


async def test_a_huge_body_is_not_read_past_the_byte_cap(api, services, monkeypatch):
    monkeypatch.setattr(http_mod, "MAX_BODY_BYTES", 1000)
    url, _, _ = api
    decl = connector(url, {"list": {"path": "/items"}})
    result = await call(services, decl, "list", {"n": 5000})
    assert not result.is_error
    assert result.content.startswith('[{"id":0,')
    assert result.content.endswith("response larger than 1000 bytes; the rest was not read]")
    assert len(result.content) < 1200
