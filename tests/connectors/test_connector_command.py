"""`fim connector import`: an OpenAPI 3 document becomes a reviewed-ready connector file."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import typer
from ruamel.yaml import YAML
from typer.testing import CliRunner

from fim.commands.connector import register
from fim.config.schema import HttpConnector

SPEC = Path(__file__).parents[1] / "fixtures" / "openapi" / "crm.yaml"


def cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """fim"""

    register(app)
    return app


def run(*args: str):
    return CliRunner().invoke(cli(), ["connector", "import", *map(str, args)])


def load(path: Path) -> HttpConnector:
    return HttpConnector.model_validate(YAML(typ="safe").load(path.read_text()))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fim.yaml").write_text("name: acme\n")
    return tmp_path


def test_writes_one_validated_action_per_operation_into_the_project(project):
    result = run(SPEC, "--name", "crm", "--project", project)
    target = project / "connectors" / "crm.yaml"
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"wrote {target}: 8 actions (1 admin, 4 read, 3 write)"
    decl = load(target)
    assert decl.description == "Acme CRM API"
    assert decl.base_url == "https://eu.crm.acme.example/api/v2"  # server variable default
    assert list(decl.actions) == [
        "list_contacts",
        "create_contact",
        "get_contact",
        "update_contact",
        "delete_contact",
        "add_note",
        "get_health",
        "head_health",
    ]
    assert target.read_text().startswith("# Imported from crm.yaml by `fim connector import`")


def test_secrets_become_variables_never_values(project):
    run(SPEC, "--name", "acme-crm", "--project", project)
    auth = load(project / "connectors" / "acme-crm.yaml").auth
    assert (auth.type, auth.token) == ("bearer", "${ACME_CRM_TOKEN}")


def test_access_follows_the_method_and_deletes_need_confirmation(project):
    run(SPEC, "--name", "crm", "--project", project)
    actions = load(project / "connectors" / "crm.yaml").actions
    access = {name: (a.access, a.requires_confirmation) for name, a in actions.items()}
    assert access["get_contact"] == ("read", False)
    assert access["head_health"] == ("read", False)
    assert access["create_contact"] == ("write", False)
    assert access["update_contact"] == ("write", False)
    assert access["delete_contact"] == ("admin", True)


def test_parameters_merge_path_query_and_body_into_one_json_schema(project):
    run(SPEC, "--name", "crm", "--project", project)
    actions = load(project / "connectors" / "crm.yaml").actions
    note = actions["add_note"]
    assert note.path == "/contacts/{contactId}/notes"
    assert note.query == ["notify"]  # stays in the query string of a POST
    assert note.parameters["required"] == ["contactId", "text"]
    jsonschema.validate({"contactId": "c1", "text": "hello", "notify": True}, note.parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"contactId": "c1"}, note.parameters)

    listing = actions["list_contacts"].parameters
    assert set(listing["properties"]) == {"limit", "q"}  # the header parameter is not exposed
    assert listing["properties"]["limit"]["maximum"] == 100  # $ref to components/parameters

    create = actions["create_contact"].parameters
    assert create["properties"]["name"]["type"] == ["string", "null"]  # OpenAPI 3.0 nullable
    assert "example" not in create["properties"]["email"]
    assert create["properties"]["address"]["properties"]["country"]["maxLength"] == 2
    update = actions["update_contact"]
    assert update.description == "Update some fields of a contact."
    assert {"id", "email", "contactId"} <= set(update.parameters["properties"])  # allOf merged


def test_json_documents_and_api_key_schemes_are_read_too(project, tmp_path):
    doc = YAML(typ="safe").load(SPEC.read_text())
    doc["security"] = [{"apiKeyAuth": []}]
    del doc["servers"]
    spec = tmp_path / "crm.json"
    spec.write_text(json.dumps(doc))
    result = run(spec, "--name", "crm", "--out", tmp_path / "out.yaml")
    assert result.exit_code == 0, result.output
    decl = load(tmp_path / "out.yaml")
    assert decl.auth.model_dump() == {
        "type": "api_key",
        "key": "${CRM_API_KEY}",
        "name": "X-Acme-Key",
        "location": "header",
    }
    assert decl.base_url == "${CRM_URL}"


def test_an_existing_file_is_kept_unless_forced(project):
    target = project / "connectors" / "crm.yaml"
    target.parent.mkdir()
    target.write_text("# hand-written\n")
    result = run(SPEC, "--name", "crm", "--project", project)
    assert result.exit_code == 1
    assert "exists" in result.output and target.read_text() == "# hand-written\n"
    assert run(SPEC, "--name", "crm", "--project", project, "--force").exit_code == 0
    assert load(target).actions


def test_stdout_output_and_the_project_connectors_folder(project):
    (project / "fim.yaml").write_text("name: acme\npaths: {connectors: apis}\n")
    printed = run(SPEC, "--name", "crm", "--out", "-")
    assert printed.exit_code == 0 and "kind: http" in printed.output
    assert run(SPEC, "--name", "crm", "--project", project).exit_code == 0
    assert (project / "apis" / "crm.yaml").is_file()


def test_swagger_2_is_refused_with_a_way_forward(tmp_path):
    spec = tmp_path / "old.yaml"
    spec.write_text("swagger: '2.0'\ninfo: {title: Old, version: '1'}\npaths: {}\n")
    result = run(spec, "--name", "old", "--out", "-")
    assert result.exit_code == 1
    assert "only OpenAPI 3.x documents can be imported (swagger 2.0)" in result.output


def test_the_imported_file_compiles_in_a_real_project(project, monkeypatch):
    from fim.build.compile import compile_project

    run(SPEC, "--name", "crm", "--project", project)
    monkeypatch.setenv("CRM_TOKEN", "tok-123456")
    snapshot = compile_project(project)
    assert snapshot.connectors["crm"].auth.token == "tok-123456"
    assert "tok-123456" in snapshot.secrets
