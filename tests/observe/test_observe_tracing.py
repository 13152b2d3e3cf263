"""OpenTelemetry traces from the event stream, received by a real OTLP/HTTP endpoint."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fim import observe
from fim.build.compile import compile_project
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.events import RunStarted, Token, ToolCallEvent, ToolResultEvent
from fim.run.agent import ask, run_agent
from fim.run.services import Services
from fim.workflows.engine import WorkflowEngine

# The expression itself: a bare 666 also turns up in the payload's random ids and timestamps.
BLOCK_666 = "grep -q '666 + 1' && { echo 'no devil maths' >&2; exit 2; } || exit 0"


def project(root: Path) -> Path:
    files = {
        "fim.yaml": 'name: traced\nstate: "sqlite:///.fim/state.db"\n'
        'models: {general: "scripted:s/helper.yaml"}\n',
        "s/lead.yaml": (
            "- tool_calls:\n"
            "    - {name: calculator, arguments: {expression: '6 * 7'}}\n"
            "    - {name: calculator, arguments: {expression: '666 + 1'}}\n"
            "- tool_calls: [{name: call_agent, arguments: {agent: helper, task: greet}}]\n"
            "- text: All done.\n"
        ),
        "s/helper.yaml": "- text: Hello.\n",
        "agents/lead.yaml": (
            "model: scripted:s/lead.yaml\ntools: [calculator]\ndelegates: [helper]\n"
            "hooks:\n  - event: PreToolUse\n    matcher: calculator\n"
            f'    command: "{BLOCK_666}"\n'
        ),
        "agents/helper.yaml": "model: scripted:s/helper.yaml\ninstructions: You greet.\n",
        "workflows/greet.yaml": (
            "nodes:\n  answer: {type: agent, agent: helper, input: hi}\n"
            "outputs: {answer: '{{ nodes.answer.output }}'}\n"
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


async def test_span_tree_of_a_run_with_tools_a_block_a_delegation_and_a_workflow(
    tmp_path, receiver
):
    snapshot = await delegate_and_workflow(tmp_path)
    from fim.observe.tracing import flush

    assert flush()
    spans = receiver.spans
    by_id = {s.span_id: s for s in spans}

    def children(span):
        return sorted((s for s in spans if s.parent_id == span.span_id), key=lambda s: s.start_ns)

    (lead,) = [s for s in spans if s.name == "invoke_agent lead"]
    assert lead.parent_id == "" and lead.attributes["gen_ai.agent.name"] == "lead"
    assert lead.attributes["fim.snapshot.version"] == snapshot.version
    assert lead.attributes["fim.status"] == "ok"
    assert lead.attributes["gen_ai.input.messages"] == "compute things"  # capture is on
    assert lead.attributes["gen_ai.output.messages"] == "All done."
    assert lead.attributes["fim.engine"] == "react" and lead.attributes["fim.iterations"] == 3
    names = [s.name for s in children(lead)]
    assert names.count("chat scripted:s/lead.yaml") == 3, names
    chat = next(s for s in children(lead) if s.name.startswith("chat"))
    assert chat.kind == 3  # CLIENT
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted:s/lead.yaml"
    assert "gen_ai.usage.input_tokens" in chat.attributes
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]

    calcs = [s for s in children(lead) if s.name == "execute_tool calculator"]
    assert len(calcs) == 2
    allowed = next(s for s in calcs if "6 * 7" in s.attributes["gen_ai.tool.call.arguments"])
    blocked = next(s for s in calcs if "666" in s.attributes["gen_ai.tool.call.arguments"])
    assert allowed.status != 2 and allowed.attributes["gen_ai.tool.call.result"] == "42"
    assert blocked.status == 2 and blocked.attributes["fim.tool.blocked"] is True
    decisions = [attrs["fim.hook.decision"] for name, attrs in blocked.events]
    assert "block" in decisions and "allow" not in decisions
    assert [a["fim.hook.decision"] for _, a in allowed.events] == ["allow"]

    (delegation,) = [s for s in children(lead) if s.name == "execute_tool call_agent"]
    (child,) = children(delegation)
    assert child.name == "invoke_agent helper" and child.trace_id == lead.trace_id
    assert child.attributes["fim.depth"] == 1
    assert [s.name for s in children(child)] == ["chat scripted:s/helper.yaml"]
    assert child.start_ns >= delegation.start_ns and child.end_ns <= delegation.end_ns

    (flow,) = [s for s in spans if s.name == "workflow greet"]
    assert flow.parent_id == "" and flow.trace_id != lead.trace_id
    (node,) = children(flow)
    assert node.name == "node answer" and node.attributes["fim.node.type"] == "agent"
    (node_run,) = children(node)
    assert node_run.name == "invoke_agent helper" and node_run.trace_id == flow.trace_id
    assert all(s.end_ns >= s.start_ns for s in spans)
    assert all(s.parent_id == "" or s.parent_id in by_id for s in spans)


async def delegate_and_workflow(root: Path) -> Snapshot:
    """One run of `lead` (which delegates) and one of the `greet` workflow (an agent
    node), both finishing as they would untraced; the project's snapshot."""
    snapshot = compile_project(project(root))
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        final = await ask(snapshot, "lead", "compute things", services=services)
        workflow = [e async for e in WorkflowEngine(snapshot, "greet", services).run({})]
    finally:
        await services.aclose()
    assert final.status == "ok" and final.output == "All done." and workflow[-1].status == "ok"
    return snapshot


async def test_a_run_the_sampler_drops_exports_nothing_and_runs_unchanged(
    tmp_path, receiver, monkeypatch
):
    """The SDK's sampler (standard variables) decides; a dropped run and the run it
    delegates to build no spans and their events are the same."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    observe.reset()
    await delegate_and_workflow(tmp_path)
    from fim.observe.tracing import flush

    assert flush()
    assert receiver.spans == []


def test_the_default_sampler_decides_inline_as_the_sdk_decides(receiver):
    """`parentbased_always_on` (the SDK's default) is decided without calling it: the same
    decision and trace state as the SDK's own sampler for every kind of parent."""
    from opentelemetry.trace import SpanContext, TraceFlags
    from opentelemetry.trace.span import TraceState

    from fim.observe import sdk

    found = sdk.sink()
    assert found.default_sampler
    state = TraceState([("vendor", "v1")])
    parents = [None] + [
        SpanContext(0xABC, 0xDEF, remote, TraceFlags(flags), state)
        for remote in (True, False)
        for flags in (TraceFlags.SAMPLED, TraceFlags.DEFAULT)
    ]
    decisions = []
    for default in (True, False):
        found.default_sampler = default
        decisions.append(
            [
                (sampled, made.trace_state, made.trace_flags.sampled)
                for made, sampled in (found.root("r", parent, {}) for parent in parents)
            ]
        )
    assert decisions[0] == decisions[1]
    assert [sampled for sampled, _, _ in decisions[0]] == [True, True, False, True, False]
    assert decisions[0][1][1] == state and decisions[0][0][1] in (None, TraceState())


async def test_the_sampler_is_asked_once_per_top_level_run(tmp_path, receiver):
    """A run the sampler dropped decides for the runs it starts: the delegated run and
    the workflow's agent node join the dropped trace without sampling again."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    from fim.observe import sdk

    asked: list[str] = []

    class DropAll(Sampler):
        def should_sample(self, parent_context, trace_id, name, *args, **kwargs):
            asked.append(name)
            return SamplingResult(Decision.DROP)

        def get_description(self) -> str:
            return "DropAll"

    sdk._provider = TracerProvider(sampler=DropAll())
    await delegate_and_workflow(tmp_path)
    assert asked == ["invoke_agent lead", "workflow greet"]


async def test_a_stream_closed_early_ends_every_span_with_what_it_knew(tmp_path, receiver):
    """A run's events replayed through `trace_run`'s watch, closed after the first tool call: the
    root still carries the run's start attributes, the open tool call ends with an error
    status, nothing leaks."""
    from fim.observe.tracing import flush, trace_run

    snapshot = compile_project(project(tmp_path))
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        events = [e async for e in run_agent(snapshot, "lead", "go", services=services)]
    finally:
        await services.aclose()

    async def source():
        for event in events:
            yield event

    stream = observe.watched(source(), trace_run(agent="replayed", run_id="r1", snapshot=snapshot))
    async for event in stream:
        if event.type == "tool_call":
            break
    await stream.aclose()
    assert flush()
    (root,) = [s for s in receiver.spans if s.name == "invoke_agent replayed"]
    assert root.attributes["fim.engine"] == "react" and "fim.status" not in root.attributes
    (tool,) = [s for s in receiver.spans if s.parent_id == root.span_id and "tool" in s.name]
    assert tool.status == 2 and tool.end_ns >= tool.start_ns


async def test_a_long_runs_tool_calls_are_exported_while_it_goes_on(receiver):
    """Spans are built a few events at a time, not event by event: a run still going has
    its finished tool calls exported (streamed tokens do not count), and the rest at its
    end."""
    from fim.observe.run_spans import READ_EVERY
    from fim.observe.tracing import flush, trace_run

    watch = trace_run(agent="long", run_id="r1", snapshot=None)
    with watch:
        watch.on(RunStarted(run_id="r1", agent="long", engine="react", input="go"))
        for n in range(READ_EVERY):
            watch.on(ToolCallEvent(call_id=f"c{n}", name="calculator"))
            watch.on(Token(text="."))
            watch.on(ToolResultEvent(call_id=f"c{n}", name="calculator", content="1"))
        assert flush()
        going = [s for s in receiver.spans if s.name == "execute_tool calculator"]
        assert READ_EVERY // 2 - 1 <= len(going) < READ_EVERY  # the run's root not yet
        assert not [s for s in receiver.spans if s.name == "invoke_agent long"]
    assert flush()
    assert len([s for s in receiver.spans if s.name == "execute_tool calculator"]) == READ_EVERY
    assert [s.name for s in receiver.spans].count("invoke_agent long") == 1


async def test_an_exception_that_ends_a_run_is_recorded_with_its_text_masked(receiver):
    """What the SDK's `record_exception` records (type, message, stack), on the run's span
    with an error status; a secret the error quotes is masked in the message and the stack."""
    from fim.observe.tracing import flush, trace_run

    async def failing():
        yield RunStarted(run_id="r1", agent="a", engine="react", input="go")
        raise RuntimeError("upstream said: token=s3cr3t-value")

    watch = trace_run(
        agent="a", run_id="r1", snapshot=None, mask=lambda t: t.replace("s3cr3t-value", "***")
    )
    with pytest.raises(RuntimeError):
        async for _ in observe.watched(failing(), watch):
            pass
    assert flush()
    (root,) = receiver.spans
    assert root.status == 2  # ERROR
    ((name, attributes),) = root.events
    assert name == "exception" and attributes["exception.type"] == "RuntimeError"
    assert attributes["exception.message"] == "upstream said: token=***"
    assert "token=***" in attributes["exception.stacktrace"]
    assert "s3cr3t" not in repr(receiver.spans)


async def test_a_tracing_failure_never_fails_the_run(tmp_path, receiver, monkeypatch, caplog):
    """A span handler that raises (a bug, an exporter's surprise) is logged; the run goes
    on to its answer and its root span ends with an error status saying tracing failed."""
    from fim.observe import run_spans, tracing

    def broken(trace_: Any, event: Any) -> None:
        raise RuntimeError("span handler bug")

    monkeypatch.setitem(run_spans.HANDLERS, "tool_call", broken)
    await delegate_and_workflow(tmp_path)  # the runs end as they would untraced
    assert "tracing of span 'invoke_agent lead' failed" in caplog.text
    assert tracing.flush()
    (root,) = [s for s in receiver.spans if s.name == "invoke_agent lead"]
    assert root.status == 2
    assert not [s for s in receiver.spans if s.name.startswith("execute_tool")]


async def test_span_attributes_keep_the_standard_span_limits(tmp_path, receiver, monkeypatch):
    """OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT and OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT apply to
    fim's spans as the SDK applies them to its own."""
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "5")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "3")
    observe.reset()
    await delegate_and_workflow(tmp_path)
    from fim.observe.tracing import flush

    assert flush()
    assert receiver.spans
    for span in receiver.spans:
        assert len(span.attributes) <= 3
        assert all(len(v) <= 5 for v in span.attributes.values() if isinstance(v, str))


async def test_spans_go_serialized_to_the_batch_processor_and_an_added_processor_gets_them(
    tmp_path, receiver
):
    """With fim's own exporter as the provider's only processor, spans are queued as bytes
    (no `ReadableSpan`); a processor added to the provider later (a user's) gets every span
    as the SDK's `ReadableSpan`, and the exporter still sends them all."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fim.observe import sdk
    from fim.observe.tracing import flush

    assert sdk.sink().queue is not None
    mine = InMemorySpanExporter()
    sdk.provider().add_span_processor(SimpleSpanProcessor(mine))
    assert sdk.sink().queue is None
    await delegate_and_workflow(tmp_path)
    assert flush()
    seen = sorted(s.name for s in mine.get_finished_spans())
    assert seen == sorted(s.name for s in receiver.spans) and "invoke_agent lead" in seen
    from opentelemetry.sdk.trace import Event

    events = [e for span in mine.get_finished_spans() for e in span.events]
    assert events and all(isinstance(e, Event) for e in events)  # hook decisions, as the SDK's


def test_warm_builds_the_tracer_before_the_heap_settles(receiver):
    """`fim serve` calls `observe.warm()` before `settle_heap()`: with tracing on, the SDK
    is loaded then, not by the first run."""
    from fim.observe import sdk

    assert sdk._provider is None
    observe.warm()
    assert sdk._provider is not None


def test_the_resource_is_the_sdks_with_its_hash_made_once(receiver, monkeypatch):
    """The provider's resource is `Resource.create`'s (service name, OTEL_RESOURCE_ATTRIBUTES,
    SDK attributes); only its hash is computed once, and it equals the SDK's own."""
    from opentelemetry.sdk.resources import Resource

    from fim.observe import tracing

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "fim-test")
    observe.reset()
    resource = tracing.provider().resource
    assert resource.attributes["service.name"] == "fim-test"
    assert resource.attributes["deployment.environment"] == "test"
    assert resource.attributes["telemetry.sdk.name"] == "opentelemetry"
    plain = Resource(resource.attributes, resource.schema_url)
    assert hash(resource) == hash(plain) and resource == plain


def test_tracing_off_imports_no_opentelemetry_and_creates_no_span(tmp_path):
    """With no OTLP endpoint configured, a run with a tool call and a delegation neither
    imports the tracing module nor the SDK: zero spans by construction."""
    project(tmp_path)
    code = textwrap.dedent(
        f"""
        import asyncio, os, sys
        for key in list(os.environ):
            if key.startswith("OTEL_"):
                del os.environ[key]
        from fim.build.compile import compile_project
        from fim.testing.runs import run_once
        snapshot = compile_project({str(tmp_path)!r})
        final = asyncio.run(run_once(snapshot, "lead", "compute things"))
        assert final.status == "ok", final
        loaded = [m for m in ("fim.observe.tracing", "opentelemetry.sdk") if m in sys.modules]
        print("loaded:", loaded)
        """
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "loaded: []" in out.stdout


PING_CALL = "{name: connector, arguments: {subcommand: execute, connector: api, action: ping}}"


@contextmanager
def ping_api(root: Path, headers: list[dict[str, str]] | None = None) -> Iterator[list[str]]:
    """A local HTTP API the project's `api` connector calls (`ping`); yields the
    `traceparent` header of every request it receives (all of them into `headers`)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from fim.testing.connectors import serve

    seen: list[str] = []

    async def ping(request: Any) -> JSONResponse:
        seen.append(request.headers.get("traceparent", ""))
        if headers is not None:
            headers.append(dict(request.headers))
        return JSONResponse({"pong": True})

    with serve(Starlette(routes=[Route("/ping", ping)])) as api_url:
        project(root)
        (root / "connectors").mkdir()
        (root / "connectors/api.yaml").write_text(
            f"kind: http\nbase_url: {api_url}\n"
            "actions:\n  ping: {method: GET, path: /ping, description: Ping}\n"
        )
        yield seen


def served_run(root: Path, traceparent: str) -> str:
    """POST a run of `caller` to a served `root` with the caller's `traceparent`; its output."""
    import httpx

    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        response = httpx.post(
            f"{srv.url}/v1/agents/caller/runs",
            json={"input": "ping it"},
            headers={"traceparent": traceparent},
            timeout=30,
        )
    assert response.status_code == 200, response.text
    return str(response.json()["output"])


def test_trace_context_flows_from_an_http_request_into_a_connector_call(tmp_path, receiver):
    """A caller's `traceparent` parents the server span, the run and its tool call; the
    connector's HTTP request carries the tool call's span as its parent."""
    with ping_api(tmp_path) as seen:
        (tmp_path / "s/caller.yaml").write_text(f"- tool_calls: [{PING_CALL}]\n- text: pong\n")
        (tmp_path / "agents/caller.yaml").write_text(
            "model: scripted:s/caller.yaml\nconnectors: [api]\n"
        )
        trace_id, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        assert served_run(tmp_path, f"00-{trace_id}-{caller_span}-01") == "pong"
    from fim.observe.tracing import flush

    assert flush()
    spans = {s.name: s for s in receiver.spans if s.trace_id == trace_id}
    server = spans["POST /v1/agents/{name}/runs"]
    assert server.parent_id == caller_span and server.kind == 2  # SERVER
    assert server.attributes["http.response.status_code"] == 200
    run = spans["invoke_agent caller"]
    assert run.parent_id == server.span_id
    tool = spans["execute_tool connector"]
    assert tool.parent_id == run.span_id
    assert seen == [f"00-{trace_id}-{tool.span_id}-01"]


def test_an_unsampled_callers_trace_context_reaches_connector_calls_of_delegated_runs(
    tmp_path, receiver
):
    """A caller's `traceparent` with the sampled flag off: no span is built (parent-based
    sampling), yet the run's connector call and its delegated run's connector call both
    carry the caller's trace id with the flag still off."""
    with ping_api(tmp_path) as seen:
        (tmp_path / "s/caller.yaml").write_text(
            f"- tool_calls: [{PING_CALL}]\n"
            "- tool_calls: [{name: call_agent, arguments: {agent: pinger, task: ping}}]\n"
            "- text: pong\n"
        )
        (tmp_path / "s/pinger.yaml").write_text(f"- tool_calls: [{PING_CALL}]\n- text: ok\n")
        (tmp_path / "agents/caller.yaml").write_text(
            "model: scripted:s/caller.yaml\nconnectors: [api]\ndelegates: [pinger]\n"
        )
        (tmp_path / "agents/pinger.yaml").write_text(
            "model: scripted:s/pinger.yaml\nconnectors: [api]\n"
        )
        trace_id = "5bf92f3577b34da6a3ce929d0e0e4737"
        assert served_run(tmp_path, f"00-{trace_id}-00f067aa0ba902b8-00") == "pong"
    from fim.observe.tracing import flush

    assert flush()
    assert [s for s in receiver.spans if s.trace_id == trace_id] == []
    assert len(seen) == 2, seen
    for header in seen:
        version, trace, span, flags = header.split("-")
        assert (version, trace, flags) == ("00", trace_id, "00") and span != "0" * 16


def test_a_callers_trace_goes_on_without_its_tracestate_or_baggage(tmp_path, receiver):
    """A caller with a key continues its trace into a connector's call, and that is all
    that goes on: its `baggage` (claims about itself: a tenant, a user) and `tracestate`
    (vendor data) are not fim's to vouch for to the services behind connectors."""
    import httpx

    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    received: list[dict[str, str]] = []
    trace_id = "6bf92f3577b34da6a3ce929d0e0e4738"
    with ping_api(tmp_path, received):
        (tmp_path / "fim.yaml").write_text(
            (tmp_path / "fim.yaml").read_text() + "server: {api_keys: [key-a]}\n"
        )
        (tmp_path / "s/caller.yaml").write_text(f"- tool_calls: [{PING_CALL}]\n- text: pong\n")
        (tmp_path / "agents/caller.yaml").write_text(
            "model: scripted:s/caller.yaml\nconnectors: [api]\n"
        )
        app = create_app(SnapshotHolder(compile_project(tmp_path)))
        with ServerThread(app) as srv:
            response = httpx.post(
                f"{srv.url}/v1/agents/caller/runs",
                json={"input": "ping it"},
                headers={
                    "Authorization": "Bearer key-a",
                    "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01",
                    "tracestate": "vendor=injected,evil=1",
                    "baggage": "tenant=other-tenant,user.id=admin",
                },
                timeout=30,
            )
    assert response.status_code == 200, response.text
    (sent,) = received
    assert sent["traceparent"].split("-")[1] == trace_id
    assert "tracestate" not in sent and "baggage" not in sent


def test_only_a_request_whose_key_checks_out_continues_the_callers_trace(
    tmp_path, receiver, monkeypatch
):
    """On a keyed server a caller's `traceparent` is honoured once its key is checked: a
    request with no key or a wrong one, or to a path anyone may read, is a new trace of
    fim's own (its SERVER span kept, as the sampler decides), never the one it named."""
    import httpx

    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    project(tmp_path)
    (tmp_path / "fim.yaml").write_text(
        (tmp_path / "fim.yaml").read_text() + "server: {api_keys: [key-a]}\n"
    )
    trace_id = "7bf92f3577b34da6a3ce929d0e0e4739"
    parent = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "")  # /healthz traced too
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        assert httpx.get(f"{srv.url}/v1/runs", headers=parent).status_code == 401
        wrong = {**parent, "Authorization": "Bearer key-b"}
        assert httpx.get(f"{srv.url}/v1/agents", headers=wrong).status_code == 401
        assert httpx.get(f"{srv.url}/healthz", headers=parent).status_code == 200
        right = {**parent, "Authorization": "Bearer key-a"}
        assert httpx.get(f"{srv.url}/v1/sessions", headers=right).status_code == 200
    from fim.observe.tracing import flush

    assert flush()
    spans = {s.name: s for s in receiver.spans}
    for name in ("GET /v1/runs", "GET /v1/agents", "GET /healthz"):
        assert spans[name].trace_id != trace_id and spans[name].parent_id == "", name
    assert spans["GET /v1/runs"].attributes["http.response.status_code"] == 401
    assert spans["GET /v1/sessions"].trace_id == trace_id


def test_json_log_lines_carry_the_request_trace_and_span_ids(tmp_path, receiver):
    """`--log-format json`: the access line of a traced request is one JSON object whose
    trace_id is the caller's and whose span_id is the server span's."""
    import io
    import json
    import logging

    import httpx

    from fim.build.reload import SnapshotHolder
    from fim.observe.logs import JsonFormatter
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("fim.access")
    old_level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    try:
        holder = SnapshotHolder(compile_project(project(tmp_path)))
        with ServerThread(create_app(holder)) as srv:
            response = httpx.get(
                f"{srv.url}/v1/agents",
                headers={"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"},
            )
        assert response.status_code == 200
    finally:
        access.removeHandler(handler)
        access.setLevel(old_level)
    from fim.observe.tracing import flush

    assert flush()
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert line["logger"] == "fim.access" and line["level"] == "info"
    assert "GET /v1/agents" in line["message"]
    (server,) = [s for s in receiver.spans if s.name == "GET /v1/agents"]
    assert line["trace_id"] == trace_id and line["span_id"] == server.span_id


def test_a_text_log_line_is_one_line_whatever_its_message_holds():
    """`fim serve`'s default text log: a message quoting someone else's text (a path, a
    provider's error) cannot write a second line nor reach the terminal's escape parser;
    a traceback keeps its lines, its escapes shown."""
    import logging

    from fim.observe.logs import TextFormatter

    formatter = TextFormatter("%(levelname)s %(name)s: %(message)s")
    forged = 'GET /x\nINFO fim.access: 10.0.0.9 "POST /v1/a" 200\x1b]0;pwned\x07\r\u2028'
    record = logging.makeLogRecord({"name": "fim.access", "levelname": "INFO", "msg": forged})
    line = formatter.format(record)
    assert line.startswith("INFO fim.access: GET /x\\nINFO fim.access: ")
    assert not any(ch in line for ch in "\n\r\x1b\x07\u2028")
    try:
        raise ValueError("bad\x1b[2J")
    except ValueError:
        failed = logging.makeLogRecord({"msg": "failed", "exc_info": sys.exc_info()})
    text = formatter.format(failed)
    assert "Traceback" in text and "\n" in text and "\x1b" not in text and "\\x1b[2J" in text


def test_serve_log_format_accepts_text_and_json_only():
    from typer.testing import CliRunner

    from fim.cli import app

    result = CliRunner().invoke(app, ["serve", "--log-format", "xml"])
    assert result.exit_code == 2 and "xml" in result.output
