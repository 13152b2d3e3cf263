"""Newcomer 52 #5: a background run refused before it starts says why, in one line.

A background run of an agent whose connector is unavailable (`${PAGER_TOKEN}` unset where
the worker runs) was recorded as a `crash` event and logged with a full traceback, as if
fim had failed. It is refused on purpose, like a served run: the record's event is an
`error` of kind `refused` with the reason (the variable, the connector's file), the log
has one WARNING line without a traceback, and the record names the snapshot it ran on.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.run.queued import KIND, execute_agent_run, mark_queued, request_data
from fim.run.services import Services
from fim.store import get_store
from fim.types import Message

FILES = {
    "fim.yaml": 'name: n52\nstate: "sqlite:///.fim/state.db"\n',
    "agents/triage.yaml": (
        "description: pages someone\nmodel: scripted:hi.script.yaml\nconnectors: [pager]\n"
    ),
    "hi.script.yaml": '- text: "hi"\n',
    "connectors/pager.yaml": (
        "kind: http\ndescription: Paging API\nbase_url: http://127.0.0.1:9\n"
        'auth: {type: bearer, token: "${PAGER_TOKEN}"}\n'
        "actions:\n  page:\n    description: Page someone\n    method: GET\n"
        "    path: /page\n"
    ),
}


async def test_a_refused_background_run_records_why_and_logs_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PAGER_TOKEN", raising=False)
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    snapshot = compile_project(tmp_path)
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=snapshot.project.state)
    request = request_data([Message(role="user", content="page bob")], None, "", snapshot)
    try:
        await mark_queued(services, "bg1", KIND, "triage", request)
        with caplog.at_level(logging.INFO, logger="fim.run"):
            status = await execute_agent_run(snapshot, services, "bg1", "triage", request)
        record = await get_store(services).get_run("bg1")
    finally:
        await services.aclose()

    assert status == "error"
    assert record is not None and record.status == "error"
    (event,) = record.data["events"]
    assert (event["type"], event["kind"]) == ("error", "refused")
    assert "connector 'pager' is unavailable: PAGER_TOKEN not set" in event["message"]
    assert "connectors/pager.yaml:4:" in event["message"]
    assert record.data["snapshot"] == snapshot.version

    (line,) = [r for r in caplog.records if r.name == "fim.run"]
    assert line.levelno == logging.WARNING and line.exc_info is None
    assert "bg1" in line.getMessage() and "PAGER_TOKEN not set" in line.getMessage()
