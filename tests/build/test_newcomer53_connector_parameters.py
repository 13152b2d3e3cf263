"""`fim validate` checks a connector action's hand-written `parameters` and `path`
(newcomer-53 #3).

`type: strng`, `required: [componnt]` and `path: /status/{comp}` each passed validate; every
call then failed with an error the model was told to fix, and could not. Now each is a
problem at its YAML node, all of them in one validate, with a did-you-mean: the schema is
checked against the JSON Schema meta-schema (`fim.schema_check`, the policy the call
applies), `required` names a property, and every `{name}` of the path is a parameter.
What `fim connector import` writes from the OpenAPI fixtures still validates.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from fim.build.parameter_checks import parameter_problems
from fim.build.schema_shape import certainly_valid
from fim.schema_check import schema_problems_at
from tests.inprocess_cli import run_fim

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "tests" / "fixtures" / "openapi"

STATUS_API = """\
kind: http
base_url: http://127.0.0.1:8081
actions:
  get_status:
    description: Current status of a component
    path: /status/{comp}
    parameters:
      type: object
      properties: {component: {type: strng, description: "Component name"}}
      required: [componnt]
"""


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


def project(root: Path, connectors: dict[str, str]) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "connectors").mkdir()
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "s.yaml").write_text("- text: hi\n")
    names = ", ".join(connectors)
    (root / "agents" / "a.yaml").write_text(f"model: scripted:s.yaml\nconnectors: [{names}]\n")
    for name, text in connectors.items():
        (root / "connectors" / f"{name}.yaml").write_text(text)
    return root


def test_the_three_typos_are_three_problems_at_their_nodes_with_a_did_you_mean(
    tmp_path: Path,
) -> None:
    done = fim(project(tmp_path / "p", {"status_api": STATUS_API}), "validate")

    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "connectors/status_api.yaml:6:19: actions.get_status.path: {comp} is not a parameter "
        "of this action, so no call can fill it (did you mean 'component'?)",
        "connectors/status_api.yaml:9:38: actions.get_status.parameters.properties.component."
        "type: unknown type 'strng' (did you mean 'string'?)",
        "connectors/status_api.yaml:10:18: actions.get_status.parameters.required.0: requires "
        "'componnt', which is not one of its properties (did you mean 'component'?)",
        "3 problems in 1 file",
    ]
    assert "Traceback" not in done.stderr


def test_any_meta_schema_problem_is_reported_at_its_key_in_jsonschemas_words(
    tmp_path: Path,
) -> None:
    connector = """\
kind: http
base_url: http://127.0.0.1:8081
actions:
  search:
    path: /search
    parameters:
      type: object
      properties:
        limit: {type: integer, minimum: none}
        tags:
          type: array
          items: {type: object, properties: {name: {type: string}}, required: [nme]}
  dump:
    method: POST
    path: /dump
    parameters: {type: array, items: {type: string}}
"""
    lines = fim(project(tmp_path / "p", {"api": connector}), "validate").stdout.splitlines()

    assert lines == [
        "connectors/api.yaml:9:41: actions.search.parameters.properties.limit.minimum: not a "
        "valid JSON Schema: 'none' is not of type 'number' "
        "(see https://json-schema.org/understanding-json-schema)",
        "connectors/api.yaml:12:80: actions.search.parameters.properties.tags.items.required.0:"
        " requires 'nme', which is not one of its properties (did you mean 'name'?)",
        "connectors/api.yaml:16:24: actions.dump.parameters.type: the parameters of an action "
        "are an object of named arguments, not 'array' (write type: object and name each "
        "argument under properties)",
        "3 problems in 1 file",
    ]


def test_a_path_parameter_nothing_resembles_says_how_to_declare_it(tmp_path: Path) -> None:
    connector = 'kind: http\nbase_url: http://h.example\nactions:\n  get: {path: "/x/{id}"}\n'
    lines = fim(project(tmp_path / "p", {"api": connector}), "validate").stdout.splitlines()

    assert lines[0] == (
        "connectors/api.yaml:4:19: actions.get.path: {id} is not a parameter of this action, "
        "so no call can fill it (declare id under parameters.properties and list it in required)"
    )


def test_required_beside_a_composition_keyword_is_left_to_the_schema(tmp_path: Path) -> None:
    # `allOf` may declare the property `required` names: nothing to guess at
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "allOf": [{"properties": {"b": {"type": "string"}}}],
        "required": ["b"],
    }
    assert parameter_problems(schema) == []


IMPORTED = [
    (SPECS / "crm.yaml", "crm", "CRM_TOKEN"),
    (SPECS / "petstore" / "petstore.yaml", "pets", None),
    (SPECS / "petstore" / "petstore-expanded.yaml", "petx", None),
    (SPECS / "open-meteo" / "forecast.yml", "meteo", None),
    (REPO / "scripts" / "crm.openapi.yaml", "shop", "SHOP_TOKEN"),
]


def test_what_connector_import_writes_from_the_fixtures_still_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path / "p", {})
    for spec, name, token in IMPORTED:
        if token:  # an unset token makes the connector unavailable, and unchecked
            monkeypatch.setenv(token, "t")
        assert fim(root, "connector", "import", str(spec), "--name", name).returncode == 0
    (root / "agents" / "a.yaml").write_text(
        "model: scripted:s.yaml\nconnectors: [crm, pets, petx, meteo, shop]\n"
    )
    done = fim(root, "validate")

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 1 agent, 5 connectors")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}},
        {"type": ["string", "null"], "enum": ["a", None], "default": "a"},
        {"type": "array", "items": {"type": "integer", "minimum": 0, "multipleOf": 2}},
        {"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, True], "x-extra": [1]},
        {"type": "object", "additionalProperties": False, "required": ["a"], "nullable": 1},
    ],
)
def test_the_fast_path_calls_plain_schemas_valid_as_jsonschema_does(
    schema: dict[str, Any],
) -> None:
    assert certainly_valid(schema)
    assert schema_problems_at(schema) == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "strng"},
        {"type": ["string", "string"]},
        {"type": []},
        {"minLength": -1},
        {"maxItems": True},
        {"multipleOf": 0},
        {"pattern": "("},
        {"required": ["a", "a"]},
        {"required": "a"},
        {"properties": {"a": 1}},
        {"items": "string"},
        {"anyOf": []},
        {"enum": "a"},
        {"description": 3},
    ],
)
def test_the_fast_path_never_calls_an_invalid_schema_valid(schema: dict[str, Any]) -> None:
    assert not certainly_valid(schema)
    assert schema_problems_at(schema) != []  # jsonschema, which words it, agrees


def test_the_fast_path_leaves_what_it_does_not_know_to_jsonschema() -> None:
    for schema in (
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"},
        {"patternProperties": {"^a": {"type": "string"}}},
        {"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}},
    ):
        assert not certainly_valid(schema)
        assert schema_problems_at(schema) == []
