"""Real-world OpenAPI import and bounded discovery (issue 21): the public petstore and
Discord specs (committed fixtures, with their licences) and generated specs shaped like
GitHub's: every name fits provider limits, bodies of every kind survive, malformed input
is one line, and `discover` never answers over its budget."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fim.commands.connector import register
from fim.config.schema import HttpConnector
from fim.connectors.discovery import BYTES_PER_TOKEN, discover
from fim.connectors.http import HttpConnectorClient
from fim.connectors.http_tool import tool_name
from fim.connectors.openapi import OpenApiError, dump_yaml, import_openapi, load_document
from fim.connectors.openapi.schemas import MAX_IMPORT_NODES, MAX_SCHEMA_NODES
from fim.connectors.provider import _actions
from fim.run.tokens import count_tokens
from fim.testing.openapi_specs import generated_spec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openapi"


def run(*args: str):
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """fim"""

    register(app)
    return CliRunner().invoke(app, ["connector", "import", *map(str, args)])


@pytest.fixture(scope="module")
def discord(tmp_path_factory: pytest.TempPathFactory) -> HttpConnector:
    path = tmp_path_factory.mktemp("discord") / "openapi.json"
    path.write_bytes(gzip.decompress((FIXTURES / "discord" / "openapi.json.gz").read_bytes()))
    return HttpConnector.model_validate(import_openapi(load_document(path), "discord"))


@pytest.fixture(scope="module")
def big() -> HttpConnector:
    """400 operations with GitHub-length operationIds under a long connector name."""
    decl = import_openapi(generated_spec(400), "github_enterprise_server")
    return HttpConnector.model_validate(decl)


def _all_keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _all_keys(v)}
    return set()


def test_the_public_specs_import(tmp_path: Path, discord: HttpConnector) -> None:
    result = run(FIXTURES / "petstore" / "petstore-expanded.yaml", "-n", "pets", "-o", "-")
    assert result.exit_code == 0, result.output
    assert "find_pets" in result.output and "delete_pet" in result.output
    assert len(discord.actions) == 242
    keys = _all_keys([a.parameters for a in discord.actions.values()])
    assert not [k for k in keys if k.startswith("x-")], "vendor keys are stripped"
    assert discord.auth is not None and discord.auth.type in ("api_key", "bearer")


def test_tool_names_fit_64_characters_deterministically(big: HttpConnector) -> None:
    names = [tool_name("github_enterprise_server", a) for a in big.actions]
    assert max(len(n) for n in names) <= 64
    assert len(set(names)) == len(names) == 400
    again = import_openapi(generated_spec(400), "github_enterprise_server")
    assert list(again["actions"]) == list(big.actions), "the same spec gives the same names"
    long = tool_name("connector_with_a_long_name", "x" * 80)
    assert len(long) == 64 and long == tool_name("connector_with_a_long_name", "x" * 80)
    assert long != tool_name("connector_with_a_long_name", "x" * 79 + "y")
    assert tool_name("crm", "get.contact") != "crm__get.contact"  # only [A-Za-z0-9_-]


def test_every_kind_of_body_is_kept(big: HttpConnector) -> None:
    upload = big.actions[next(n for n in big.actions if "upload" in n)]
    assert upload.body == "multipart" and upload.files == ["file"]
    assert upload.parameters["properties"]["file"]["contentEncoding"] == "base64"
    labels = big.actions[next(n for n in big.actions if "set_resource_labels" in n)]
    assert labels.body_parameter == "body"
    assert labels.parameters["properties"]["body"]["type"] == "array"
    create = big.actions[next(n for n in big.actions if "create_resource" in n)]
    assert {"id", "name", "owner"} <= set(create.parameters["properties"])
    assert create.parameters["properties"]["state"]["type"] == ["string", "null"]
    assert big.base_url == "https://api.example.com/api/v3", "server variables filled"


def test_requests_are_built_for_each_body_kind(big: HttpConnector) -> None:
    client = HttpConnectorClient("gh", big)
    labels = next(a for n, a in big.actions.items() if "set_resource_labels" in n)
    req = client.build_request(labels, {"owner": "o", "repo": "r", "body": ["bug", "p1"]})
    assert req["json"] == ["bug", "p1"]
    upload = next(a for n, a in big.actions.items() if "upload" in n)
    req = client.build_request(
        upload, {"owner": "o", "repo": "r", "file": "aGVsbG8=", "label": "logo"}
    )
    assert req["files"] == {"file": ("file", b"hello")} and req["data"] == {"label": "logo"}
    with pytest.raises(ValueError, match="base64"):
        client.build_request(upload, {"owner": "o", "repo": "r", "file": "not base64!"})
    binary = HttpConnector.model_validate(
        import_openapi(
            {
                "openapi": "3.1.0",
                "paths": {
                    "/blobs": {
                        "post": {
                            "requestBody": {"content": {"application/octet-stream": {"schema": {}}}}
                        }
                    }
                },
            },
            "store",
        )
    )
    action = binary.actions["post_blobs"]
    req = client.build_request(action, {"body": "AAEC"})
    assert req["content"] == b"\x00\x01\x02"
    assert req["headers"]["Content-Type"] == "application/octet-stream"


def test_a_spec_without_auth_warns_and_header_auth_is_inferred(tmp_path: Path) -> None:
    spec = {"openapi": "3.0.0", "paths": {"/a": {"get": {"operationId": "a"}}}}
    path = tmp_path / "noauth.json"
    path.write_text(json.dumps(spec))
    result = run(path, "-n", "noauth", "-o", "-")
    assert result.exit_code == 0
    assert "no security scheme" in result.output  # warning on stderr (mixed in by CliRunner)
    header = {"name": "X-API-Key", "in": "header", "required": True, "schema": {"type": "string"}}
    spec["paths"]["/a"]["get"]["parameters"] = [header]  # optional: `${KEYED_API_KEY:-}`
    decl = import_openapi(spec, "keyed")
    assert decl["auth"] == {
        "type": "api_key",
        "key": "${KEYED_API_KEY}",
        "name": "X-API-Key",
        "location": "header",
    }


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"openapi": "3.0.0", "paths": [1, 2]}', "'paths' must be a mapping"),
        (b"\x89PNG\r\n\x1a\n\x00\x00binary", "not a text file"),
        ('{"openapi": "3.0.0", "paths": {"/a": {"get": {"parameters": {"x": 1}}}}}', "list"),
        ('{"openapi": "3.0.0", "paths": {"/a": {"get": [1]}}}', "must be a mapping"),
        ('{"openapi": "3.0.0", "paths": {"/a": {"get": {"parameters": [1]}}}}', "mapping"),
        ('{"openapi": "3.0.0", "paths": {', "invalid JSON"),
        ("openapi: 3.0.0\npaths: {a: [\n", "invalid YAML"),
        ('{"swagger": "2.0", "paths": {}}', "swagger 2.0"),
    ],
)
def test_malformed_input_is_one_line(tmp_path: Path, content: str | bytes, expected: str) -> None:
    path = tmp_path / "spec.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = run(path, "-n", "bad", "-o", "-")
    assert result.exit_code == 1
    assert expected in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    with pytest.raises(OpenApiError):
        import_openapi(load_document(path), "bad")


# --------------------------------------------------------------------------- hostile specs
# A spec is a third party's file: whatever it holds, the import takes time and memory in
# proportion to its size and fails, if it must, with one line per problem.


def _refs(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _fan_out(levels: int, width: int) -> dict[str, Any]:
    """S0..S{levels-1}, each with `width` properties pointing at the next: 13 KB of JSON
    for 60^5 schemas inlined."""
    schemas: dict[str, Any] = {f"S{levels}": {"type": "string"}}
    for i in range(levels):
        props = {f"p{j}": _refs(f"S{i + 1}") for j in range(width)}
        schemas[f"S{i}"] = {"type": "object", "properties": props}
    body = {"content": {"application/json": {"schema": _refs("S0")}}}
    return {
        "openapi": "3.0.0",
        "components": {"schemas": schemas},
        "paths": {"/a": {"post": {"operationId": "a", "requestBody": body}}},
    }


def _inlined(value: object, seen: dict[int, int] | None = None) -> int:
    """Nodes `value` is once written out, counted over its shared parts without writing."""
    seen = {} if seen is None else seen
    if not isinstance(value, dict | list):
        return 1
    if id(value) not in seen:
        items = value.values() if isinstance(value, dict) else value
        keys = len(value) if isinstance(value, dict) else 0
        seen[id(value)] = 1 + keys + sum(_inlined(v, seen) for v in items)
    return seen[id(value)]


def _cli(spec: Path) -> subprocess.CompletedProcess[str]:
    """`fim connector import` in a process of its own: a crash is a failed test, not a
    crashed test run."""
    return subprocess.run(
        [sys.executable, "-m", "fim.cli", "connector", "import", str(spec), "-n", "x", "-o", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_ref_fan_out_is_written_as_placeholders_within_the_budget() -> None:
    warnings: list[str] = []
    decl = import_openapi(_fan_out(5, 60), "bomb", warnings)
    assert _inlined(decl["actions"]) < MAX_SCHEMA_NODES
    properties = decl["actions"]["a"]["parameters"]["properties"]
    assert len(properties) == 60, "what fits is kept: S0's own properties"
    assert properties["p0"] == {
        "type": "object",
        "description": "S1 (not expanded: the schema is too large)",
    }
    assert any("placeholders (not expanded): S1;" in w for w in warnings)
    assert len(dump_yaml(decl, "bomb.json")) < 20_000


def test_a_request_body_too_big_to_inline_keeps_its_own_fields() -> None:
    """S0 inlines ~90,000 nodes: it is written one level deep, its properties inlined
    while the action's budget lasts and placeholders after."""
    decl = import_openapi(_fan_out(3, 30), "wide")
    properties = decl["actions"]["a"]["parameters"]["properties"]
    assert len(properties) == 30
    inlined = [p for p in properties.values() if "properties" in p]
    assert 10 < len(inlined) < 30 and _inlined(decl["actions"]) <= MAX_SCHEMA_NODES + 1000
    assert properties["p29"]["description"] == "S1 (not expanded: the schema is too large)"


def test_an_import_inlines_a_bounded_number_of_nodes_in_all() -> None:
    """Each action fits its own budget; together they stop at the import's."""
    spec = _fan_out(3, 22)  # S0 inlines some 32,000 nodes
    body = spec["paths"]["/a"]["post"]["requestBody"]
    spec["paths"] = {
        f"/a{i}": {"post": {"operationId": f"a{i}", "requestBody": body}} for i in range(100)
    }
    decl = import_openapi(spec, "wide")
    assert MAX_IMPORT_NODES * 0.9 < _inlined(decl["actions"]) <= MAX_IMPORT_NODES + 100 * 1000
    assert "not expanded" not in json.dumps(decl["actions"]["a0"])
    assert decl["actions"]["a99"]["parameters"]["properties"] == {}, "S0 is a placeholder"


def test_the_public_specs_inline_every_schema(discord: HttpConnector) -> None:
    """The budgets are far above real specs: nothing of theirs becomes a placeholder."""
    for spec in ("petstore/petstore-expanded.yaml", "crm.yaml"):
        warnings: list[str] = []
        decl = import_openapi(load_document(FIXTURES / spec, warnings), "x", warnings)
        assert "not expanded" not in json.dumps(decl) and not warnings[1:]
    assert "not expanded" not in json.dumps([a.parameters for a in discord.actions.values()])


LAUGHS = "openapi: 3.0.0\nx-defs:\n  l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
    f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 6)
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            LAUGHS + "paths: {/a: {get: {operationId: a}}}\n",
            "spec.yaml:3:12: document expands to more than",
        ),
        (
            "openapi: 3.0.0\npaths:\n  /a:\n    get:\n      parameters:\n"
            "        - {name: q, in: query, schema: &s {type: object, default: *s}}\n",
            "spec.yaml:6:40: recursive YAML alias (an anchor that contains itself)",
        ),
        (
            "openapi: 3.0.0\npaths: {/a: {get: {x: " + "[" * 300 + "]" * 300 + "}}}\n",
            "spec.yaml:2:219: nesting too deep: lists and mappings more than 200 levels deep",
        ),
    ],
    ids=["nested-aliases", "recursive-anchor", "too-deep"],
)
def test_a_hostile_yaml_spec_is_one_error_line(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(content)
    result = run(path, "-n", "bad", "-o", "-")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.startswith(f"error: {path}") and expected.split(":", 1)[1] in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_spec_nested_30000_deep_is_one_error_line_not_a_segfault(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(
        "openapi: 3.0.0\npaths: {/a: {get: {x: " + "[" * 30_000 + "]" * 30_000 + "}}}\n"
    )
    done = _cli(path)
    assert done.returncode == 1, done.stderr[-500:]
    assert done.stderr.startswith(f"error: {path}:2:219: nesting too deep")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_json_spec_too_deep_to_write_is_one_error_line(tmp_path: Path) -> None:
    """`json` reads ~1,000 levels; a `default` that deep is copied into the connector."""
    deep: object = 0
    for _ in range(600):
        deep = [deep]
    param = {"name": "q", "in": "query", "schema": {"type": "array", "default": deep}}
    spec = {"openapi": "3.0.0", "paths": {"/a": {"get": {"parameters": [param]}}}}
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(spec))
    result = run(path, "-n", "deep", "-o", "-")
    assert result.exit_code == 1 and not isinstance(result.exception, RecursionError)
    assert f"error: {path}: the document nests too deeply to import" in result.output


def test_yaml_specs_read_scalars_as_json_has_them(tmp_path: Path) -> None:
    """YAML 1.2, as OpenAPI asks: `yes` and `on` are strings and a date is its text (PyYAML
    made them booleans and a `date` the YAML writer could not write)."""
    path = tmp_path / "spec.yaml"
    path.write_text(
        "openapi: 3.0.0\npaths:\n  /a:\n    get:\n      parameters:\n"
        "        - {name: q, in: query, schema: {enum: [yes, no, on], default: 2024-01-31}}\n"
    )
    decl = import_openapi(load_document(path), "x")
    schema = decl["actions"]["get_a"]["parameters"]["properties"]["q"]
    assert schema == {"enum": ["yes", "no", "on"], "default": "2024-01-31"}


def test_a_duplicate_key_in_a_yaml_spec_is_a_warning_and_the_first_stays(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        "openapi: 3.0.0\npaths:\n  /a:\n    get: {operationId: first}\n"
        "    get: {operationId: second}\n"
    )
    result = run(path, "-n", "dup", "-o", "-")
    assert result.exit_code == 0, result.output
    assert (
        f"warning: {path}:5:5: duplicate key 'get' (first defined on line 4; keep only one)"
        in result.output
    )
    assert "  first:" in result.output and "second" not in result.output.split("kind:")[1]


# --------------------------------------------------------------------------- discovery

BUDGET = 2000


def _tokens(text: str) -> int:
    return count_tokens(text, "openai/gpt-4o")


def test_discover_is_an_index_within_the_budget_with_pages(discord: HttpConnector) -> None:
    first = discover("discord", discord, budget=BUDGET)
    assert _tokens(first) <= BUDGET and len(first.encode()) <= BUDGET * BYTES_PER_TOKEN
    assert "page 1 of" in first and "parameters:" not in first
    pages = int(first.split("page 1 of ")[1].split(" ")[0])
    seen = set()
    for page in range(1, pages + 1):
        text = discover("discord", discord, page=page, budget=BUDGET)
        assert _tokens(text) <= BUDGET
        seen |= {line[2:].split(" ")[0] for line in text.splitlines() if line.startswith("- ")}
    assert seen == set(discord.actions), "the pages together list every action"


def test_discover_searches_and_shows_schemas_only_when_asked(discord: HttpConnector) -> None:
    found = discover("discord", discord, query="thread member", budget=BUDGET)
    assert "thread_member" in found and _tokens(found) <= BUDGET
    assert "get_guild" not in found.replace("thread", "")
    several = ",".join(list(discord.actions)[:40])
    schemas = discover("discord", discord, action=several, budget=BUDGET)
    assert "parameters: {" in schemas and _tokens(schemas) <= BUDGET
    assert "Not shown (budget)" in schemas, "what did not fit is named"
    missing = discover("discord", discord, action="get_guidl", budget=BUDGET)
    assert "Closest: get_guild" in missing


def test_the_stub_groups_a_big_connector_by_tag(big: HttpConnector) -> None:
    stub = _actions(big)
    assert stub.startswith("400 actions by tag — area0 (12)") and "more tags" in stub
    assert len(stub) < 1200
    tagged = discover("gh", big, tag="area3", budget=BUDGET)
    listed = [line for line in tagged.splitlines() if line.startswith("- ")]
    assert len(listed) == 12 and all("/area3/" in line for line in listed)


def test_fim_show_names_the_shortened_tool(tmp_path: Path) -> None:
    from fim.cli import app

    long = "list_resources_for_authenticated_user_in_repository_with_filters"
    (tmp_path / "fim.yaml").write_text("name: s\n")
    (tmp_path / "connectors").mkdir()
    (tmp_path / "connectors" / "enterprise_github.yaml").write_text(
        f"kind: http\nbase_url: https://x\nactions:\n  {long}:\n    path: /a\n"
        "  short:\n    path: /b\n"
    )
    result = CliRunner().invoke(
        app, ["show", "connector", "enterprise_github", "--project", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    shown = tool_name("enterprise_github", long)
    assert f"tool: {shown}" in result.output and len(shown) == 64
    assert result.output.count("tool: ") == 1, "only shortened names are listed"
