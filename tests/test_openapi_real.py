"""Real-world OpenAPI import and bounded discovery (issue 21): the public petstore and
Discord specs (committed fixtures, with their licences) and generated specs shaped like
GitHub's: every name fits provider limits, bodies of every kind survive, malformed input
is one line, and `discover` never answers over its budget."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fim.commands.connector import register
from fim.config.schema import HttpConnector
from fim.connectors import _actions
from fim.connectors.discovery import BYTES_PER_TOKEN, discover
from fim.connectors.http import HttpConnectorClient, tool_name
from fim.connectors.openapi import OpenApiError, import_openapi, load_document
from fim.run.tokens import count_tokens
from fim.testing.openapi_specs import generated_spec

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"


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
    header = {"name": "X-API-Key", "in": "header", "schema": {"type": "string"}}
    spec["paths"]["/a"]["get"]["parameters"] = [header]
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
