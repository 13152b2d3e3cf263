"""Newcomer 53 #8 and #9: the trace backend gets the runs, not the dev page's polling, and
a run's trace id links to its trace.

- #8: a GET (or HEAD) of the dev page, its assets, `/favicon.ico`, the probes or an API
  route under `/v1/` only reads: it is not traced unless it carries a `traceparent`. In
  ten minutes of the page, 168 of the 175 traces a backend received were such requests.
  A run, and any POST, is traced as before. `OTEL_PYTHON_EXCLUDED_URLS`, when set, alone
  decides (empty: every request is traced).
- #9: with `FIM_TRACE_URL` (else `observability.trace_url:` in fim.yaml), a template with
  `{trace_id}`, `GET /v1/runs/{id}` carries the run's `data.trace_url`, which the dev page
  renders as the link on the trace id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.errors import ConfigError
from fim.server.app import create_app
from fim.testing.otlp import Receiver
from fim.testing.server import ServerThread

JAEGER = "http://localhost:16686/trace/{trace_id}"
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def project(root: Path, fim_yaml: str = "") -> Path:
    files = {
        "fim.yaml": 'name: n53\nstate: "sqlite:///.fim/state.db"\n' + fim_yaml,
        "agents/a.yaml": "description: says ok\nmodel: scripted:s.yaml\n",
        "s.yaml": "- text: ok\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def flushed() -> None:
    from fim.observe.tracing import flush

    assert flush()


def roots(receiver: Receiver) -> list[str]:
    return sorted(s.name for s in receiver.spans if s.name.split()[0] in ("GET", "HEAD", "POST"))


def test_the_dev_pages_reads_are_not_traced_and_a_run_is(tmp_path, receiver, monkeypatch):
    monkeypatch.delenv("OTEL_PYTHON_EXCLUDED_URLS", raising=False)
    holder = SnapshotHolder(compile_project(project(tmp_path)))
    with ServerThread(create_app(holder)) as srv:
        for path in (
            "/", "/static/app.js", "/favicon.ico", "/docs", "/healthz", "/metrics",
            "/v1/status", "/v1/agents", "/v1/agents/a/prompt", "/v1/runs?limit=50",
            "/v1/sessions", "/v1/approvals", "/v1/runs/7371de97dd6b",
        ):  # fmt: skip
            httpx.get(f"{srv.url}{path}", timeout=30)
        httpx.head(f"{srv.url}/static/app.css")
        answer = httpx.post(f"{srv.url}/v1/agents/a/runs", json={"input": "hi"}, timeout=60)
        assert answer.status_code == 200
    flushed()
    assert roots(receiver) == ["POST /v1/agents/{name}/runs"]
    assert [s.name for s in receiver.spans if s.name == "invoke_agent a"] == ["invoke_agent a"]


def test_a_read_that_carries_a_traceparent_is_traced(tmp_path, receiver, monkeypatch):
    monkeypatch.delenv("OTEL_PYTHON_EXCLUDED_URLS", raising=False)
    holder = SnapshotHolder(compile_project(project(tmp_path)))
    with ServerThread(create_app(holder)) as srv:
        httpx.get(f"{srv.url}/v1/agents", headers={"traceparent": CALLER})
        httpx.get(f"{srv.url}/v1/status")
    flushed()
    (span,) = [s for s in receiver.spans if s.name.startswith("GET")]
    assert span.name == "GET /v1/agents"
    assert span.trace_id == CALLER.split("-")[1]


def test_otel_python_excluded_urls_set_decides_alone(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "")  # trace every request
    holder = SnapshotHolder(compile_project(project(tmp_path)))
    with ServerThread(create_app(holder)) as srv:
        httpx.get(f"{srv.url}/v1/agents")
        httpx.get(f"{srv.url}/favicon.ico")
    flushed()
    assert roots(receiver) == ["GET /favicon.ico", "GET /v1/agents"]


def _run_record(root: Path) -> dict[str, Any]:
    holder = SnapshotHolder(compile_project(root))
    with ServerThread(create_app(holder)) as srv:
        run = httpx.post(f"{srv.url}/v1/agents/a/runs", json={"input": "hi"}, timeout=60).json()
        record = httpx.get(f"{srv.url}/v1/runs/{run['run_id']}", timeout=30).json()
    assert isinstance(record, dict)
    return record


def _trace_id(record: dict[str, Any]) -> str:
    started = next(e for e in record["data"]["events"] if e["type"] == "run_started")
    assert isinstance(started["trace_id"], str) and len(started["trace_id"]) == 32
    return started["trace_id"]


def test_fim_trace_url_links_a_runs_trace(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("FIM_TRACE_URL", JAEGER)
    record = _run_record(
        project(tmp_path, "observability: {trace_url: 'http://other/{trace_id}'}\n")
    )
    trace = _trace_id(record)
    assert record["data"]["trace_url"] == f"http://localhost:16686/trace/{trace}"  # env wins


def test_fim_yaml_observability_trace_url_links_it_too(tmp_path, receiver, monkeypatch):
    monkeypatch.delenv("FIM_TRACE_URL", raising=False)
    record = _run_record(project(tmp_path, f"observability: {{trace_url: '{JAEGER}'}}\n"))
    assert record["data"]["trace_url"] == JAEGER.replace("{trace_id}", _trace_id(record))


def test_without_a_template_a_run_has_no_trace_url(tmp_path, receiver, monkeypatch):
    monkeypatch.delenv("FIM_TRACE_URL", raising=False)
    record = _run_record(project(tmp_path))
    _trace_id(record)
    assert "trace_url" not in record["data"]


@pytest.mark.parametrize(
    "value", ["http://localhost:16686/trace/", "file:///tmp/{trace_id}", "{trace_id}"]
)
def test_a_trace_url_without_the_placeholder_or_http_is_refused_at_its_line(tmp_path, value):
    root = project(tmp_path, f"observability:\n  trace_url: '{value}'\n")
    with pytest.raises(ConfigError) as caught:
        compile_project(root)
    (problem,) = caught.value.problems
    assert (problem.path, problem.line) == ("fim.yaml", 4)
    assert "{trace_id}" in problem.message
