"""Newcomer 53 #5: a hot reload that leaves agents unable to run is not a clean success.

Saving a SKILL.md with a YAML error compiles (a broken skill fails only the agents that
use it), so the reload swapped the snapshot, logged `INFO reloaded snapshot ...`, and
`/v1/status` had `last_reload_error: null`: nothing said that two agents now failed every
run. Now the reload's log line is a WARNING naming those agents and the first problem's
`file:line:col`, and `/v1/status` (and its stream) lists them under `unavailable`, each
with its reason, in the published OpenAPI schema too.
"""

from __future__ import annotations

import logging
from pathlib import Path

import jsonschema
import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, reload_once
from fim.server.app import create_app
from fim.server.devpage import _unavailable

SKILL = "skills/getting-started/SKILL.md"
GOOD = "---\nname: getting-started\ndescription: How to start\n---\nSay hello.\n"
BROKEN = "---\nname: getting-started\ndescription: How: to start\n---\nSay hello.\n"
FILES = {
    "fim.yaml": 'name: n53\nstate: "sqlite:///.fim/state.db"\n',
    "agents/assistant.yaml": "description: every skill\nmodel: scripted:s.yaml\nskills: all\n",
    "agents/helper.yaml": (
        "description: the one skill\nmodel: scripted:s.yaml\nskills: [getting-started]\n"
    ),
    "agents/plain.yaml": "description: no skill\nmodel: scripted:s.yaml\n",
    "s.yaml": "- text: ok\n",
    SKILL: GOOD,
}


def project(root: Path) -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


async def test_a_reload_that_breaks_agents_logs_a_warning_naming_them_and_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    (root / SKILL).write_text(BROKEN)
    with caplog.at_level(logging.INFO, logger="fim.build.reload"):
        assert await reload_once(root, holder)  # it compiled: the new snapshot serves
    assert not holder.errors
    (line,) = [r for r in caplog.records if r.name == "fim.build.reload"]
    assert line.levelno == logging.WARNING
    said = line.getMessage()
    assert "2 agents unavailable (assistant, helper)" in said
    assert f"{SKILL}:3:" in said
    assert "plain" not in said

    caplog.clear()
    (root / SKILL).write_text(GOOD)
    with caplog.at_level(logging.INFO, logger="fim.build.reload"):
        assert await reload_once(root, holder)
    (line,) = [r for r in caplog.records if r.name == "fim.build.reload"]
    assert line.levelno == logging.INFO and "unavailable" not in line.getMessage()


def test_the_status_lists_the_agents_that_cannot_run_with_why(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / SKILL).write_text(BROKEN)
    app = create_app(SnapshotHolder(compile_project(root)))
    with TestClient(app, base_url="http://localhost") as client:
        status = client.get("/v1/status").json()
        doc = client.get("/openapi.json").json()
    assert status["last_reload_error"] is None  # the reload worked ...
    unavailable = {u["agent"]: u for u in status["unavailable"]}  # ... but these fail
    assert sorted(unavailable) == ["assistant", "helper"]
    helper = unavailable["helper"]
    assert helper["reason"].startswith(
        f"uses the skill 'getting-started', which failed to load: {SKILL}:3:"
    )
    assert (helper["path"], helper["line"]) == (SKILL, 3)

    schema = doc["components"]["schemas"]["Status"]
    assert "unavailable" in schema["properties"]
    jsonschema.validate(status, {**schema, "components": doc["components"]})
    item = doc["components"]["schemas"]["UnavailableAgent"]
    assert {"agent", "reason"} <= set(item["required"])


def test_a_project_whose_agents_all_run_lists_none(tmp_path: Path) -> None:
    app = create_app(SnapshotHolder(compile_project(project(tmp_path))))
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/v1/status").json()["unavailable"] == []


def test_a_tenant_hears_which_agents_not_the_project_files_that_say_why(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / SKILL).write_text(BROKEN)
    snapshot = compile_project(root)
    for entry in _unavailable(snapshot, owner="a-tenants-key-hash"):
        assert set(entry) == {"agent", "reason"}
        assert "SKILL.md" not in entry["reason"]
    assert [e["agent"] for e in _unavailable(snapshot, owner=None)] == ["assistant", "helper"]
