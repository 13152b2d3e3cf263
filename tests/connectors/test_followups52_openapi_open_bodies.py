"""An imported request body that allows more properties than it names stays open.

Since attack-65 F1 an action whose parameters name properties refuses any other argument
unless its schema says `additionalProperties` or `patternProperties`. `fim connector
import` merges a JSON (or form) body's properties into the action's parameters, and used to
drop those two keywords on the way: an open body became a closed action, and a call the API
accepts was refused. Now the keywords are the action's, a body naming no properties (`type:
object`, any object) allows any argument, and an `anyOf`/`oneOf` of objects (Discord's
webhook and thread bodies) declares every branch's properties instead of none. The public
specs in tests/fixtures/openapi still import, and every action accepts what it declares.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors.http import HttpConnectorClient
from fim.connectors.http_arguments import declared_names, undeclared
from fim.connectors.openapi import import_openapi, load_document
from tests.http_stubs import Quiet, answer, serving

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openapi"


def spec(body: dict[str, Any], ctype: str = "application/json") -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "labels", "version": "1"},
        "servers": [{"url": "https://api.example.test"}],
        "paths": {
            "/items/{id}/labels": {
                "post": {
                    "operationId": "setLabels",
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "requestBody": {"content": {ctype: {"schema": body}}},
                    "responses": {"200": {"description": "OK"}},
                }
            }
        },
        "components": {
            "schemas": {
                "Base": {"type": "object", "properties": {"name": {"type": "string"}}},
                "Open": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "additionalProperties": {"type": "string"},
                },
            }
        },
    }


def imported(document: dict[str, Any]) -> HttpConnector:
    return HttpConnector.model_validate(import_openapi(document, "labels"))


OPEN_BODIES = {
    "additionalProperties: true": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "additionalProperties": True,
    },
    "additionalProperties: a schema": {"$ref": "#/components/schemas/Open"},
    "patternProperties": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x_": {"type": "string"}},
    },
    "no properties (any object)": {"type": "object"},
    "allOf with an open part": {
        "allOf": [{"$ref": "#/components/schemas/Base"}, {"$ref": "#/components/schemas/Open"}]
    },
    "anyOf with a branch naming nothing": {
        "anyOf": [{"$ref": "#/components/schemas/Base"}, {"type": "object"}]
    },
}


@pytest.mark.parametrize("ctype", ["application/json", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("body", OPEN_BODIES.values(), ids=list(OPEN_BODIES))
def test_an_open_body_stays_open_through_the_import(body: dict[str, Any], ctype: str) -> None:
    action = imported(spec(body, ctype)).actions["set_labels"]
    args = {"id": "7", "name": "n", "x_colour": "red"}
    assert undeclared(action, args) is None, action.parameters
    assert declared_names(action) is None


def test_the_kept_keywords_are_the_bodys() -> None:
    action = imported(spec(OPEN_BODIES["additionalProperties: a schema"])).actions["set_labels"]
    assert action.parameters["additionalProperties"] == {"type": "string"}
    assert set(action.parameters["properties"]) == {"id", "name"}
    pattern = imported(spec(OPEN_BODIES["patternProperties"])).actions["set_labels"]
    assert pattern.parameters["patternProperties"] == {"^x_": {"type": "string"}}


def test_a_body_naming_its_properties_still_refuses_others() -> None:
    for body in (
        {"type": "object", "properties": {"name": {"type": "string"}}},
        {"allOf": [{"$ref": "#/components/schemas/Base"}]},
        {"anyOf": [{"$ref": "#/components/schemas/Base"}]},
    ):
        action = imported(spec(body)).actions["set_labels"]
        assert "additionalProperties" not in action.parameters
        assert undeclared(action, {"id": "7", "name": "n"}) is None
        assert "'_method'" in (undeclared(action, {"id": "7", "_method": "DELETE"}) or "")


def test_an_anyof_body_declares_each_branchs_properties() -> None:
    body = {
        "oneOf": [
            {"type": "object", "required": ["kind", "a"], "properties": {"kind": {}, "a": {}}},
            {"type": "object", "required": ["kind", "b"], "properties": {"kind": {}, "b": {}}},
        ]
    }
    action = imported(spec(body)).actions["set_labels"]
    assert set(action.parameters["properties"]) == {"id", "kind", "a", "b"}
    assert action.parameters["required"] == ["id", "kind"], "required by every branch only"
    assert undeclared(action, {"id": "7", "kind": "x", "b": 1}) is None
    assert undeclared(action, {"id": "7", "c": 1}) is not None


SEEN: list[dict[str, Any]] = []


class Recorder(Quiet):
    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        SEEN.append({"path": self.path, "body": json.loads(self.rfile.read(size) or b"null")})
        answer(self, b"{}")


@pytest.fixture
def api() -> Iterator[str]:
    SEEN.clear()
    with serving(Recorder) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


async def test_an_argument_the_open_body_allows_is_sent_in_the_body(api: str) -> None:
    declaration = import_openapi(spec(OPEN_BODIES["additionalProperties: a schema"]), "labels")
    declaration["base_url"] = api
    client = HttpConnectorClient("labels", HttpConnector.model_validate(declaration))
    try:
        result = await client.call("set_labels", {"id": "7", "name": "n", "colour": "red"})
    finally:
        await client.aclose()
    assert SEEN == [{"path": "/items/7/labels", "body": {"name": "n", "colour": "red"}}], result


def _public(tmp_path: Path) -> dict[str, HttpConnector]:
    discord = tmp_path / "discord.json"
    discord.write_bytes(gzip.decompress((FIXTURES / "discord" / "openapi.json.gz").read_bytes()))
    paths = {
        "petstore": FIXTURES / "petstore" / "petstore.yaml",
        "petstore_expanded": FIXTURES / "petstore" / "petstore-expanded.yaml",
        "open_meteo": FIXTURES / "open-meteo" / "forecast.yml",
        "crm": FIXTURES / "crm.yaml",
        "discord": discord,
    }
    return {
        name: HttpConnector.model_validate(import_openapi(load_document(path), name))
        for name, path in paths.items()
    }


def test_the_public_specs_import_and_accept_what_they_declare(tmp_path: Path) -> None:
    connectors = _public(tmp_path)
    assert {name: len(c.actions) for name, c in connectors.items()} == {
        "petstore": 3,
        "petstore_expanded": 4,
        "open_meteo": 1,
        "crm": 8,
        "discord": 242,
    }
    for name, connector in connectors.items():
        for aname, action in connector.actions.items():
            every = {p: "x" for p in action.parameters.get("properties") or {}}
            assert undeclared(action, every) is None, f"{name}.{aname}"
    discord = connectors["discord"].actions
    # a body of `additionalProperties: {type: string}` and no properties (free-form metadata)
    metadata = discord["update_lobby_message_external_moderation_metadata"]
    assert metadata.parameters["additionalProperties"]["type"] == "string"
    assert undeclared(metadata, {"lobby_id": "1", "message_id": "2", "reason": "spam"}) is None
    # an `anyOf` body: its fields are parameters, anything else is still refused
    webhook = discord["execute_webhook"]
    assert undeclared(webhook, {"webhook_id": "1", "webhook_token": "t", "content": "hi"}) is None
    assert undeclared(webhook, {"webhook_id": "1", "webhook_token": "t", "_method": "x"})
    # a closed body stays closed
    assert undeclared(connectors["crm"].actions["add_note"], {"contactId": "1", "x": 1})
