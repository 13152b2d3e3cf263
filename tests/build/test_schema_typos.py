"""A misspelt JSON Schema keyword is warned at its line (`fim.build.schema_typos`).

JSON Schema ignores keys it does not know, so `requried: [id]` is a valid schema that
requires nothing and `propertes:` one with no properties: `fim validate` passed both, and
the model was offered a tool without its arguments. Each key close to a keyword is now a
warning with the keyword meant (`--strict` fails on it), while the words real API specs
carry beside the keywords (`x-...`, `nullable`, `example`) are no typo."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from fim.build.schema_typos import keyword_typos
from fim.connectors.openapi import import_openapi, load_document
from tests.inprocess_cli import run_fim

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openapi"

CONNECTOR = """\
kind: http
base_url: https://status.example.com
actions:
  get_component:
    method: GET
    path: /components/{id}
    description: One component
    parameters:
      type: object
      properties:
        id: {type: string, maxlength: 40, x-internal: true, nullable: true}
        verbose:
          type: boolean
          defualt: false
      requried: [id]
"""
AGENT = """\
description: Answers in JSON
model: scripted:answers.yaml
output_schema:
  type: object
  propertes:
    answer: {type: string}
"""


def project(root: Path) -> Path:
    files = {
        "fim.yaml": "name: typos\n",
        "answers.yaml": '- text: "{}"\n',
        "connectors/status.yaml": CONNECTOR,
        "agents/json.yaml": AGENT,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_each_misspelt_keyword_is_warned_at_its_line_with_the_keyword_meant(
    tmp_path: Path,
) -> None:
    done = run_fim("validate", cwd=project(tmp_path))
    assert done.returncode == 0, done.stderr  # a warning: JSON Schema allows the key
    lines = [line for line in done.stderr.splitlines() if "JSON Schema keyword" in line]
    assert [line.split(": warning")[0] for line in lines] == [
        "connectors/status.yaml:11:28",
        "connectors/status.yaml:14:11",
        "connectors/status.yaml:15:7",
        "agents/json.yaml:5:3",
    ]
    assert "(did you mean 'maxLength'?)" in lines[0] and "'default'" in lines[1]
    assert "actions.get_component.parameters.requried" in lines[2] and "'required'" in lines[2]
    assert "output_schema.propertes" in lines[3] and "'properties'" in lines[3]
    assert not any("x-internal" in line or "nullable" in line for line in lines)


def test_strict_fails_on_them(tmp_path: Path) -> None:
    assert run_fim("validate", "--strict", cwd=project(tmp_path)).returncode == 1


@pytest.mark.parametrize(
    "spec", ["discord/openapi.json.gz", "petstore/petstore-expanded.yaml", "crm.yaml"]
)
def test_the_schemas_of_real_public_api_specs_have_none(spec: str, tmp_path: Path) -> None:
    path = FIXTURES / spec
    if path.suffix == ".gz":  # the document is read as text: unpacked first
        path = tmp_path / path.stem
        path.write_bytes(gzip.decompress((FIXTURES / spec).read_bytes()))
    decl = import_openapi(load_document(path, []), "api", [])
    actions = decl["actions"]
    assert actions
    assert [t for a in actions.values() for t in keyword_typos(a["parameters"])] == []
