"""Traces, metrics and logs as a newcomer meets them (newcomer review 4, findings 5-7 and
10-12): a CLI run with no collector listening, the standard exporter names, the trace id on
every surface, route-template span names, budget stops in the metrics, JSON logs that are
JSON on every line."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from fim import observe
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.events import ErrorEvent, LLMCall, RunFinished, RunStarted, ToolResultEvent
from fim.observe.logs import JsonFormatter
from fim.observe.metrics import Metrics, RunCounter
from fim.run.agent import ask, run_agent
from fim.run.services import Services
from fim.server.app import create_app
from fim.testing.server import ServerThread
from fim.types import Usage
from tests.inprocess_cli import run_fim

MAIN = Path(__file__).resolve().parents[2]
HEX32 = re.compile(r"[0-9a-f]{32}")


def project(root: Path) -> Path:
    files = {
        "fim.yaml": 'name: helpdesk\nstate: "sqlite:///.fim/state.db"\n',
        "agents/a.yaml": "model: scripted:s.yaml\ntools: [calculator]\n",
        "s.yaml": "- tool_calls: [{name: calculator, arguments: {expression: '1+1'}}]\n"
        "- text: ok\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _env(**env: str) -> dict[str, str]:
    """This environment with the OTEL variables only those given, this checkout's fim."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    clean.update(env, PYTHONPATH=str(MAIN), NO_COLOR="1")
    return clean


def fim(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`fim ARGS` in `root` as a process of its own: its spans are exported at its exit."""
    return subprocess.run(
        [sys.executable, "-m", "fim.cli", *args],
        cwd=root,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- 5: no collector, console, none ---------------------------------------------------


def test_a_cli_run_with_no_collector_says_so_in_one_line_naming_the_endpoint(tmp_path):
    """The run answers; its spans cannot go out at exit: one line names the endpoint and
    no urllib3 retry text is printed (the SDK's exit flush retried for 7 s)."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    done = fim(project(tmp_path), "run", "a", "hi", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert done.returncode == 0 and done.stdout.strip() == "ok"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("traces: could not export")
    assert f"{endpoint}/v1/traces" in lines[0] and "collector running" in lines[0]
    assert "retrying" not in done.stderr and "Transient" not in done.stderr


def test_the_exit_flush_tries_once_within_the_exit_timeout(monkeypatch):
    """At exit fim's OTLP/HTTP exporter is told so: the upstream client stops retrying
    (its shutdown event set), its timeout is cut to `EXIT_TIMEOUT_S`, and after one failed
    batch the later ones are dropped without another attempt."""
    from fim.observe.exporters import EXIT_TIMEOUT_S
    from fim.observe.exporters import exit_timeout as _exit_timeout
    from fim.observe.otlp_fast import FastOTLPSpanExporter

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TIMEOUT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", raising=False)
    assert _exit_timeout() == EXIT_TIMEOUT_S
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    exporter = FastOTLPSpanExporter(endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces")
    exporter.home = (Resource.create({}), InstrumentationScope("fim"))
    exporter.finishing(_exit_timeout())
    assert exporter._client._shutdown_event.is_set()
    assert exporter._client._timeout == EXIT_TIMEOUT_S
    sent: list[bytes] = []
    monkeypatch.setattr(exporter._client, "export", lambda data: sent.append(data) or _failed())
    assert exporter.export([b"\x0a\x00"]).name == "FAILURE"
    assert exporter.export([b"\x0a\x00"]).name == "FAILURE"
    assert len(sent) == 1
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")  # the standard variable wins
    assert _exit_timeout() is None
    exporter.shutdown()


def _failed() -> object:
    from opentelemetry.exporter.otlp.common.http import _ExportResult

    return _ExportResult(False, None, None, ConnectionRefusedError("Connection refused"))


def test_console_prints_the_spans_on_stderr_and_leaves_stdout_to_the_answer(tmp_path):
    done = fim(project(tmp_path), "run", "a", "hi", "--json", OTEL_TRACES_EXPORTER="console")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # every line JSON
    started = next(e for e in events if e["type"] == "run_started")
    assert HEX32.fullmatch(started["trace_id"])
    assert '"name": "invoke_agent a"' in done.stderr
    assert f'"trace_id": "0x{started["trace_id"]}"' in done.stderr


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, False),  # otlp needs an endpoint
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, True),
        ({"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
    ],
)
def test_the_standard_exporter_names_turn_tracing_on_or_off(monkeypatch, caplog, env, on):
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    observe._enabled = None
    try:
        with caplog.at_level(logging.WARNING, logger="fim.observe"):
            assert observe.tracing_enabled() is on
    finally:
        observe._enabled = None
    refused = [r.getMessage() for r in caplog.records if "OTEL_TRACES_EXPORTER" in r.getMessage()]
    assert bool(refused) == ("zipkin" in env["OTEL_TRACES_EXPORTER"]), refused


# -- 6: the trace id everywhere; session and tenant on the span -----------------------


def test_fim_run_v_and_fim_runs_show_print_the_runs_trace_id(tmp_path):
    root = project(tmp_path)
    done = fim(root, "run", "a", "hi", "-v", OTEL_TRACES_EXPORTER="console")
    assert done.returncode == 0, done.stderr
    summary = next(line for line in done.stderr.splitlines() if line.startswith("ok · "))
    trace = summary.rsplit("· trace ", 1)[1].strip()
    assert HEX32.fullmatch(trace) and f'"trace_id": "0x{trace}"' in done.stderr
    # reading the store back needs no process of its own (the run's exit wrote it)
    listed = run_fim("runs", "list", "--json", cwd=root, env=_env(), timeout=120)
    run_id = json.loads(listed.stdout.splitlines()[0])["id"]
    shown = run_fim("runs", "show", run_id, cwd=root, env=_env(), timeout=120)
    assert shown.stdout.splitlines()[0].endswith(f"run {run_id} · trace {trace}")


async def test_run_started_carries_the_root_spans_trace_id_and_the_span_the_session_and_tenant(
    tmp_path, receiver
):
    snapshot = compile_project(project(tmp_path))
    services = Services(root=tmp_path, state_url=snapshot.project.state, providers=CAPABILITIES)
    try:
        events = [
            e
            async for e in run_agent(
                snapshot, "a", "hi", services=services, session="s1", owner="k" * 16
            )
        ]
    finally:
        await services.aclose()
    from fim.observe.tracing import flush

    assert flush()
    started = next(e for e in events if isinstance(e, RunStarted))
    (root,) = [s for s in receiver.spans if s.name == "invoke_agent a"]
    assert started.trace_id == root.trace_id
    assert json.loads(started.model_dump_json())["trace_id"] == root.trace_id  # stored so
    assert root.attributes["gen_ai.conversation.id"] == "s1"
    assert root.attributes["fim.tenant"] == "k" * 16


async def test_run_started_has_no_trace_id_when_tracing_is_off(tmp_path, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    observe.reset()
    snapshot = compile_project(project(tmp_path))
    services = Services(root=tmp_path, state_url=snapshot.project.state, providers=CAPABILITIES)
    try:
        events = [e async for e in run_agent(snapshot, "a", "hi", services=services)]
    finally:
        await services.aclose()
        observe.reset()
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.trace_id is None


def test_an_http_answer_names_its_trace_in_a_traceresponse_header(tmp_path, receiver):
    holder = SnapshotHolder(compile_project(project(tmp_path)))
    with ServerThread(create_app(holder)) as srv:
        answer = httpx.post(f"{srv.url}/v1/agents/a/runs", json={"input": "hi"}, timeout=60)
    assert answer.status_code == 200
    version, trace, span, flags = answer.headers["traceresponse"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    from fim.observe.tracing import flush

    assert flush()
    (server,) = [s for s in receiver.spans if s.name.startswith("POST ")]
    assert (server.trace_id, server.span_id) == (trace, span)
    (run,) = [s for s in receiver.spans if s.name == "invoke_agent a"]
    assert run.trace_id == trace


# -- 7: route templates, no probes ------------------------------------------------------


def test_server_spans_are_named_by_route_template_and_probes_are_not_traced(tmp_path, receiver):
    holder = SnapshotHolder(compile_project(project(tmp_path)))
    with ServerThread(create_app(holder)) as srv:
        # a GET under /v1/ only reads: not traced by default (newcomer-53 #8)
        assert httpx.post(f"{srv.url}/v1/runs/7371de97dd6b/cancel").status_code == 404
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
        httpx.get(f"{srv.url}/metrics")
        assert httpx.get(f"{srv.url}/no/such/path").status_code == 404
    from fim.observe.tracing import flush

    assert flush()
    names = sorted(s.name for s in receiver.spans)
    assert names == ["GET", "POST /v1/runs/{run_id}/cancel"], names
    (run,) = [s for s in receiver.spans if s.name == "POST /v1/runs/{run_id}/cancel"]
    assert run.attributes["http.route"] == "/v1/runs/{run_id}/cancel"
    assert run.attributes["url.path"] == "/v1/runs/7371de97dd6b/cancel"


def test_otel_python_excluded_urls_chooses_what_is_not_traced(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "^/v1/agents$")
    holder = SnapshotHolder(compile_project(project(tmp_path)))
    with ServerThread(create_app(holder)) as srv:
        httpx.get(f"{srv.url}/v1/agents")
        httpx.get(f"{srv.url}/healthz")
    from fim.observe.tracing import flush

    assert flush()
    assert [s.name for s in receiver.spans] == ["GET /healthz"]


# -- 10: metrics ------------------------------------------------------------------------


def test_a_budget_stop_is_its_own_outcome_and_latencies_carry_agent_and_tool():
    metrics = Metrics()
    run = RunCounter("bot")
    usage = Usage(prompt_tokens=3, completion_tokens=1)
    for event in (
        LLMCall(model="m", iteration=1, usage=usage, duration_ms=250.0),
        ToolResultEvent(call_id="c1", name="calculator", content="2", duration_ms=40.0),
        ErrorEvent(message="155 tokens spent, above budget.max_tokens 150", kind="budget_exceeded"),
        RunFinished(output="", status="error", usage=usage),
    ):
        metrics.on("bot", event, run.blocked, run)
    failed = RunCounter("bot")
    for event in (ErrorEvent(message="boom"), RunFinished(output="", status="error")):
        metrics.on("bot", event, failed.blocked, failed)
    get = metrics.registry.get_sample_value
    assert get("fim_runs_total", {"agent": "bot", "outcome": "budget_exceeded"}) == 1
    assert get("fim_runs_total", {"agent": "bot", "outcome": "error"}) == 1
    model = {"agent": "bot", "model": "m"}
    assert get("fim_model_call_duration_seconds_sum", model) == 0.25
    tool = {"agent": "bot", "tool": "calculator"}
    assert get("fim_tool_call_duration_seconds_sum", tool) == 0.04
    assert get("fim_tool_call_duration_seconds_count", tool) == 1


# -- 11: JSON logs ----------------------------------------------------------------------


@contextmanager
def json_log(*names: str) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def test_json_lines_drop_uvicorns_color_message():
    with json_log("uvicorn.error") as stream:
        logging.getLogger("uvicorn.error").info(
            "Started server process [%d]", 7, extra={"color_message": "\x1b[36m%d\x1b[0m"}
        )
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert line["message"] == "Started server process [7]" and "color_message" not in line


def test_the_start_up_line_is_a_json_record_when_the_log_is_json(capsys):
    from fim.observe.logs import announce

    root = logging.getLogger()
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    try:
        announce("fim serve: project 'p' · ...", project="p", url="http://127.0.0.1:8000")
    finally:
        root.removeHandler(handler)
    (line,) = [json.loads(x) for x in handler.stream.getvalue().splitlines()]
    assert line["logger"] == "fim.serve" and line["project"] == "p"
    assert line["url"] == "http://127.0.0.1:8000"
    assert capsys.readouterr().err == ""
    announce("plain line", project="p")  # a text log: the line as it is, on stderr
    assert capsys.readouterr().err == "plain line\n"


def test_access_lines_carry_method_path_status_duration_and_bytes_as_fields(tmp_path):
    holder = SnapshotHolder(compile_project(project(tmp_path)))
    with json_log("fim.access") as stream, ServerThread(create_app(holder)) as srv:
        body = httpx.get(f"{srv.url}/v1/agents/nope").content
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert line["method"] == "GET" and line["path"] == "/v1/agents/nope"
    assert line["status"] == 404 and line["bytes"] == len(body)
    assert isinstance(line["duration_ms"], float) and line["client"] == "127.0.0.1"


# -- 12: service name, gen_ai.system ------------------------------------------------------


async def test_the_service_is_named_after_the_project_unless_otel_service_name_says(
    tmp_path, receiver, monkeypatch
):
    from fim.observe.sdk import provider

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    snapshot = compile_project(project(tmp_path))
    services = Services(root=tmp_path, state_url=snapshot.project.state, providers=CAPABILITIES)
    try:
        await ask(snapshot, "a", "hi", services=services)
        assert provider().resource.attributes["service.name"] == "helpdesk"
        observe.reset()
        monkeypatch.setenv("OTEL_SERVICE_NAME", "desk-prod")
        await ask(snapshot, "a", "hi", services=services)
        assert provider().resource.attributes["service.name"] == "desk-prod"
    finally:
        await services.aclose()


def test_a_scripted_models_system_is_scripted():
    from fim.observe.gen_ai import provider_of as _provider_of

    assert _provider_of("scripted:evals/demo.script.yaml") == "scripted"
    assert _provider_of("scripted:s.yaml") == "scripted"
    assert _provider_of("anthropic/claude-x") == "anthropic"
    assert _provider_of("ollama/qwen2.5:7b") == "ollama"
    assert _provider_of("gpt-4o") is None
