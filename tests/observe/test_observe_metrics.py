"""`GET /metrics`: Prometheus counters fed by the event stream, parsed with the client's
own exposition parser."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, reload_once
from fim.events import Event, LLMCall, RunFinished, RunStarted
from fim.server.app import create_app
from fim.testing.server import ServerThread
from fim.types import Usage
from tests.observe.test_observe_tracing import project


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def delta(before, after, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def test_metrics_count_runs_tools_blocks_tokens_and_reloads(tmp_path):
    root = project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    with ServerThread(create_app(holder)) as srv:
        before = scrape(srv.url)
        response = httpx.post(
            f"{srv.url}/v1/agents/lead/runs", json={"input": "compute"}, timeout=60
        )
        assert response.status_code == 200 and response.json()["status"] == "ok"
        (root / "fim.yaml").write_text("name: [broken\n")
        assert not await reload_once(root, holder)
        after = scrape(srv.url)

    assert delta(before, after, "fim_runs_total", agent="lead", outcome="ok") == 1
    assert delta(before, after, "fim_runs_total", agent="helper", outcome="ok") == 1
    calc = {"agent": "lead", "tool": "calculator"}
    assert delta(before, after, "fim_tool_calls_total", **calc, outcome="ok") == 1
    assert delta(before, after, "fim_tool_calls_total", **calc, outcome="blocked") == 1
    assert (
        delta(before, after, "fim_tool_calls_total", agent="lead", tool="call_agent", outcome="ok")
        == 1
    )
    blocks = [k for k in after if k[0] == "fim_hook_blocks_total" and ("agent", "lead") in k[1]]
    assert blocks and sum(delta(before, after, k[0], **dict(k[1])) for k in blocks) == 1
    model = "scripted:s/lead.yaml"
    seconds = "fim_model_call_duration_seconds_count"
    assert delta(before, after, seconds, agent="lead", model=model) == 3
    assert delta(before, after, "fim_run_duration_seconds_count", agent="lead") == 1
    assert (
        delta(before, after, "fim_tokens_total", agent="lead", model=model, direction="input") > 0
    )
    assert delta(before, after, "fim_reloads_total", outcome="failed") == 1
    assert after[("fim_active_runs", (("agent", "lead"),))] == 0


def test_tool_labels_are_capped_against_hostile_names():
    from fim.observe.metrics import MAX_TOOL_LABELS, Metrics

    m = Metrics()
    labels = {m.tool_label(f"made_up_{i}") for i in range(MAX_TOOL_LABELS + 50)}
    assert len(labels) == MAX_TOOL_LABELS + 1 and "other" in labels
    assert len(m.tool_label("x" * 500)) <= 64


def test_children_are_looked_up_once_and_still_exported():
    from fim.observe.metrics import Metrics

    m = Metrics()
    child = m.c_runs("lead", "ok")
    assert m.c_runs("lead", "ok") is child is m.runs.labels("lead", "ok")
    child.inc()
    m.c_runs("lead", "ok").inc()
    m.c_runs("lead", "error").inc()
    get = m.registry.get_sample_value
    assert get("fim_runs_total", {"agent": "lead", "outcome": "ok"}) == 2
    assert get("fim_runs_total", {"agent": "lead", "outcome": "error"}) == 1


async def test_a_run_closed_early_with_metrics_and_tracing_on_counts_cancelled_and_ends_its_spans(
    tmp_path, receiver, monkeypatch
):
    """Both watches of one run (`fim serve` with an OTLP endpoint) see its end: a reader
    that stops after the first tool call leaves no active run, a `cancelled` count and a
    root span ended with the error it knew."""
    from fim import observe
    from fim.capabilities import CAPABILITIES
    from fim.observe import sdk
    from fim.observe.metrics import METRICS
    from fim.run.agent import run_agent
    from fim.run.services import Services

    monkeypatch.setattr(observe, "_metrics", True)
    snapshot = compile_project(project(tmp_path))
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )

    def sample(name: str, **labels: str) -> float:
        return METRICS.registry.get_sample_value(name, labels) or 0.0

    before = sample("fim_runs_total", agent="lead", outcome="cancelled")
    try:
        stream = run_agent(snapshot, "lead", "go", services=services)
        async for event in stream:
            if event.type == "tool_call":
                break
        await stream.aclose()
    finally:
        await services.aclose()
    assert sample("fim_runs_total", agent="lead", outcome="cancelled") == before + 1
    assert sample("fim_active_runs", agent="lead") == 0
    assert sdk.flush()
    (root,) = [s for s in receiver.spans if s.name == "invoke_agent lead"]
    assert root.status == 2 and ("exception", root.events[-1][1]) == root.events[-1]
    assert root.events[-1][1]["exception.type"] == "GeneratorExit"


def test_on_a_keyed_server_the_metrics_are_an_operators(tmp_path):
    """They count every key's runs together: a tenant reading them learned the others'
    traffic and spend. A tenant's own usage is `GET /v1/usage`."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    (tmp_path / "fim.yaml").write_text(
        "name: m\nserver: {api_keys: [tenant-k3y], operator_keys: [ops-k3y]}\n"
    )
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        tenant = httpx.get(f"{srv.url}/metrics", headers={"Authorization": "Bearer tenant-k3y"})
        assert tenant.status_code == 403 and "operator key" in tenant.json()["error"]["message"]
        ops = httpx.get(f"{srv.url}/metrics", headers={"Authorization": "Bearer ops-k3y"})
        assert ops.status_code == 200 and "fim_runs" in ops.text


async def counted(agent: str, *events: Event) -> list[Event]:
    """`events` as one run's stream, read through that run's metrics watch (`RunCounter`),
    as `fim serve` reads a run's events; what the reader got."""
    from fim.observe import watched
    from fim.observe.metrics import RunCounter

    async def stream() -> AsyncIterator[Event]:
        for event in events:
            yield event

    return [event async for event in watched(stream(), RunCounter(agent))]


async def test_a_negative_token_count_from_an_endpoint_counts_nothing_and_fails_no_run():
    """Prometheus counters raise on a negative amount: an endpoint answering
    `prompt_tokens: -100000` made the served run a 500. The count is the endpoint's own
    number, so a negative one counts nothing; the rest of the run is counted as usual."""
    from fim.observe.metrics import METRICS

    get = METRICS.registry.get_sample_value
    tokens = {"agent": "neg", "model": "gw"}
    before = get("fim_tokens_total", {**tokens, "direction": "input"}) or 0.0
    call = LLMCall(
        model="gw", iteration=1, usage=Usage(prompt_tokens=-100000, completion_tokens=5, cost=-1)
    )
    events = (RunStarted(agent="neg", input="hi"), call, RunFinished(output="hi"))
    assert await counted("neg", *events) == list(events)
    assert get("fim_tokens_total", {**tokens, "direction": "input"}) == before
    assert get("fim_tokens_total", {**tokens, "direction": "output"}) == 5
    assert not get("fim_cost_usd_total", tokens)
    assert get("fim_runs_total", {"agent": "neg", "outcome": "ok"}) == 1


async def test_an_observer_that_fails_never_fails_the_run_and_is_logged_once(monkeypatch, caplog):
    """A bug in counting (here every event raises) is the metrics' loss, not the run's:
    every event still reaches the reader, and one traceback is logged, not one per event
    or per run."""
    from fim.observe import metrics

    def broken(*args: object) -> None:
        raise ValueError("counting is broken")

    monkeypatch.setattr(metrics.METRICS, "on", broken)
    monkeypatch.setattr(metrics, "_logged", False)
    events = (RunStarted(agent="b", input="hi"), RunFinished(output="hi"))
    with caplog.at_level(logging.ERROR, logger="fim.observe"):
        assert await counted("b", *events) == list(events)
        assert await counted("b", *events) == list(events)
    failures = [r for r in caplog.records if "counting" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None


async def test_made_up_tool_names_share_one_label_and_real_tools_keep_theirs(tmp_path):
    """A tool the agent does not have is counted as `unknown` (and takes no label slot),
    also past a turn's call limit, where the engine refuses calls by count; a real tool
    the model calls keeps its name, even when the slots are all taken by then."""
    from fim.observe.metrics import MAX_TOOL_LABELS, Metrics
    from fim.testing.runs import run_events

    made_up = ", ".join(f"{{name: made_up_{i}, arguments: {{}}}}" for i in range(40))
    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text('name: t\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "agents/a.yaml").write_text(
        "description: d\nmodel: scripted:s.yaml\ntools: [calculator]\n"
    )
    (tmp_path / "s.yaml").write_text(
        f"- tool_calls: [{made_up}]\n"
        "- tool_calls: [{name: calculator, arguments: {expression: '1+1'}}]\n- text: ok\n"
    )
    events = await run_events(compile_project(tmp_path), "a", "hi")
    m = Metrics()
    blocked: set[str] = set()
    for event in events:
        m.on("a", event, blocked)
    get = m.registry.get_sample_value
    assert get("fim_tool_calls_total", {"agent": "a", "tool": "unknown", "outcome": "error"}) == 40
    assert get("fim_tool_calls_total", {"agent": "a", "tool": "calculator", "outcome": "ok"}) == 1
    full = Metrics()
    for i in range(MAX_TOOL_LABELS):
        full.tool_label(f"real_{i}")
    assert full.tool_label("made_up", real=False) == "unknown"
    assert full.tool_label("real_7", real=False) == "real_7"  # a real tool's, whoever calls it
