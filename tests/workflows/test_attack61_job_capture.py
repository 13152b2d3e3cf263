"""Whose runs keep their model calls' content (attack-61 F2): a run a `fim worker` (or a
durable workflow job) executes serves a server's callers, so it keeps no request or
response on its `llm_call` events unless fim.yaml (`observability.capture_content: true`)
or the OpenTelemetry variable asks for it. A `Services` nobody marked as the developer's
own keeps nothing (fail closed); `fim run` still keeps what it sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.events import LLMCall
from fim.run.agent import run_agent
from fim.run.capture import capture_content
from fim.run.services import Services
from fim.workflows.admission import job_services
from tests.inprocess_cli import run_fim

FILES = {
    "fim.yaml": 'name: jobs\nstate: "sqlite:///.fim/state.db"\n',
    "agents/t.yaml": "description: d\nmodel: scripted:t.script.yaml\n"
    "instructions: You are t. Internal note, for the operator only.\ntools: [calculator]\n",
    "t.script.yaml": '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n'
    "- text: It is 42.\n",
}


def project(root: Path, fim_yaml: str = "") -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + (fim_yaml if name == "fim.yaml" else ""))
    return root


@pytest.fixture(autouse=True)
def no_otel_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)


async def job_calls(root: Path) -> list[LLMCall]:
    snapshot = compile_project(root)
    services = job_services(snapshot, snapshot.project.state, CAPABILITIES)
    try:
        events = [e async for e in run_agent(snapshot, "t", "what is 6*7?", services=services)]
    finally:
        await services.aclose()
    return [e for e in events if isinstance(e, LLMCall)]


async def test_a_job_run_by_a_worker_keeps_no_request_or_response(tmp_path: Path) -> None:
    found = await job_calls(project(tmp_path))
    assert len(found) == 2
    assert all(c.request is None and c.response is None for c in found)


async def test_fim_yaml_turns_capture_on_for_a_worker_too(tmp_path: Path) -> None:
    root = project(tmp_path, "observability: {capture_content: true}\n")
    found = await job_calls(root)
    assert found[0].request is not None and "Internal note" in json.dumps(found[0].request)


def test_services_nobody_marked_local_keep_no_content(tmp_path: Path) -> None:
    snapshot = compile_project(project(tmp_path))
    bare: Any = Services(root=tmp_path, providers=CAPABILITIES)
    assert capture_content(snapshot.project, bare) is False
    assert capture_content(snapshot.project, object()) is False
    assert capture_content(snapshot.project, Services(root=tmp_path, local=True)) is True


def test_fim_run_still_keeps_what_it_sent(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert run_fim("-p", str(root), "run", "t", "what is 6*7?", cwd=root).returncode == 0
    shown = run_fim("-p", str(root), "runs", "show", "last", "--json", cwd=root)
    found = [e for e in json.loads(shown.stdout)["events"] if e["type"] == "llm_call"]
    assert "Internal note" in found[0]["request"]["system"]
    assert found[0]["response"]
