"""A `server.api_keys` entry may carry a `name:` (newcomer-7 #12): `fim usage --by key`
and `GET /v1/usage?by=key` show a named key by its name instead of its place in fim.yaml,
and a tenant with its keys' names beside it. A name is short and printable (it reaches
terminals and dashboards); a key with a name and no tenant owns its runs alone, as a plain
key does."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.cli import app
from fim.config.schema import Project
from fim.server.app import create_app
from fim.store import Store
from fim.store.owners import claim, key_owner
from fim.store.usage import record
from fim.testing.server import ServerThread
from fim.types import Usage

KEYS = """\
server:
  api_keys:
    - {key: partner-k3y, name: partner-a}
    - {key: acme-old-k3y, tenant: acme, name: acme-2025}
    - {key: acme-new-k3y, tenant: acme, name: acme-2026}
    - plain-k3y
  operator_keys: [op-k3y]
"""


def project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: named\nstate: "sqlite:///.fim/state.db"\n' + KEYS)
    (root / "agents" / "a.yaml").write_text("description: d\nmodel: openai/stub\n")
    return root


async def spent(root: Path, owner: str, tokens: int) -> None:
    store = Store("sqlite:///.fim/state.db", root=root)
    try:
        run_id = uuid.uuid4().hex[:12]
        await claim(store, run_id, owner)
        await record(
            store, run_id=run_id, agent="a", model="m", status="ok", calls=1,
            usage=Usage(prompt_tokens=tokens),
        )  # fmt: skip
    finally:
        store.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = project(tmp_path / "p")
    asyncio.run(spent(root, key_owner(b"partner-k3y"), 100))
    asyncio.run(spent(root, key_owner(b"acme-new-k3y", "acme"), 30))
    asyncio.run(spent(root, key_owner(b"plain-k3y"), 7))
    return root


EXPECTED = {"partner-a": 100, "tenant acme (acme-2025, acme-2026)": 30, "server.api_keys[3]": 7}


def test_fim_usage_by_key_shows_key_names(root: Path) -> None:
    result = CliRunner().invoke(app, ["usage", "--by", "key", "--json", "-p", str(root)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert {row["key"]: row["total_tokens"] for row in rows} == EXPECTED
    table = CliRunner().invoke(app, ["usage", "--by", "key", "-p", str(root)])
    assert "partner-a" in table.output


def test_get_usage_by_key_shows_key_names(root: Path) -> None:
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        url = f"{srv.url}/v1/usage"
        every = httpx.get(url, params={"by": "key"}, headers={"Authorization": "Bearer op-k3y"})
        assert {r["key"]: r["total_tokens"] for r in every.json()["usage"]} == EXPECTED
        mine = httpx.get(url, params={"by": "key"}, headers={"Authorization": "Bearer partner-k3y"})
        assert [r["key"] for r in mine.json()["usage"]] == ["partner-a"]


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"key": "k3y-value", "name": ""}, "name"),
        ({"key": "k3y-value", "name": "x" * 65}, "name"),
        ({"key": "k3y-value", "name": "evil\nline"}, "name"),
        ({"key": "k3y-value", "name": "bidi\u202eflip"}, "name"),
        ({"key": "k3y-value", "name": " padded"}, "name"),
        ({"key": "k3y-value", "tenant": ""}, "tenant"),
        # nothing that reads like another key's label in a report (attack-45 F1)
        ({"key": "k3y-value", "name": "tenant acme (acme-prod)"}, "name"),
        ({"key": "k3y-value", "name": "server.operator_keys[0]"}, "name"),
        ({"key": "k3y-value", "name": "partner\u3164"}, "name"),
        ({"key": "k3y-value", "tenant": "acme\u202e\x1b[31m"}, "tenant"),
    ],
)
def test_a_key_name_is_short_and_printable(entry: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Project.model_validate({"server": {"api_keys": [entry]}})
    # the entry is no string either: the error that counts is the mapping's, on the field
    assert any(e["loc"][-2:] == ("TenantKey", field) for e in caught.value.errors())


def test_two_keys_cannot_share_a_name() -> None:
    keys = [{"key": "k3y-one", "name": "partner"}, {"key": "k3y-two", "name": "partner"}]
    with pytest.raises(ValidationError, match="the name 'partner' is given to two keys"):
        Project.model_validate({"server": {"api_keys": keys}})


def test_a_named_key_without_a_tenant_owns_its_runs_alone() -> None:
    from fim.server.callers import identify

    settings = Project.model_validate(
        {"server": {"api_keys": [{"key": "partner-k3y", "name": "partner-a"}]}}
    ).server
    assert identify(b"partner-k3y", settings).owner == key_owner(b"partner-k3y")


def test_the_json_schema_documents_the_name() -> None:
    schema = Project.model_json_schema()
    name = schema["$defs"]["TenantKey"]["properties"]["name"]
    assert {"minLength": 1, "maxLength": 64}.items() <= name["anyOf"][0].items()
    assert name["anyOf"][0]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9._-]*$"
