"""Attack round 8, observability exits: what a caller's trace headers, a client's request
line and a model's invented tool names do to traces, logs and metrics
(/work/notes/attack-8.md, findings 5 to 8)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.testing.server import ServerThread

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def write(root: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


def test_a_callers_baggage_is_not_forwarded_to_a_connectors_service(tmp_path, receiver):
    """`baggage` is what a caller asserts about itself (`user.id=admin`, `tenant=...`);
    services behind a connector or an MCP server may act on it. fim continues the caller's
    trace (`traceparent`), but what the caller claims in baggage must not leave fim as if
    fim said it."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from fim.testing.connectors import serve

    seen: list[dict[str, Any]] = []

    async def ping(request: Any) -> JSONResponse:
        seen.append({k: request.headers.get(k) for k in ("traceparent", "baggage")})
        return JSONResponse({"pong": True})

    with serve(Starlette(routes=[Route("/ping", ping)])) as api_url:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: t\nstate: "sqlite:///.fim/state.db"\n'
                "server: {api_keys: [key-a]}\n",
                "connectors/api.yaml": f"kind: http\nbase_url: {api_url}\nactions:\n"
                "  ping: {method: GET, path: /ping, description: Ping}\n",
                "agents/caller.yaml": "description: d\nmodel: scripted:s.yaml\nconnectors: [api]\n",
                "s.yaml": "- tool_calls: [{name: connector, arguments: {subcommand: execute, "
                "connector: api, action: ping}}]\n- text: pong\n",
            },
        )
        with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
            response = httpx.post(
                f"{srv.url}/v1/agents/caller/runs",
                json={"input": "x"},
                headers={
                    "Authorization": "Bearer key-a",
                    "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01",
                    "baggage": "tenant=other-tenant,user.id=admin",
                },
                timeout=30,
            )
    assert response.status_code == 200, response.text
    assert len(seen) == 1 and TRACE in (seen[0]["traceparent"] or "")  # the trace goes on
    assert not seen[0]["baggage"], seen[0]


def test_a_request_without_a_key_does_not_choose_its_trace_or_force_sampling(
    tmp_path, receiver, monkeypatch
):
    """With `parentbased_traceidratio` at 0 the operator exports nothing; a caller with no
    key sending `traceparent ...-01` still had a span exported, in the trace id it chose
    (spans planted into another request's trace, an exporter flood from anyone who can
    reach the port). A refused request's trace context is not the caller's to decide."""
    from fim import observe

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.0")
    observe.reset()
    write(
        tmp_path,
        {
            "fim.yaml": 'name: t\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-a]}\n',
            "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\n",
            "s.yaml": "- text: hi\n",
        },
    )
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        refused = httpx.get(
            f"{srv.url}/v1/runs", headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
        )
    assert refused.status_code == 401
    from fim.observe.tracing import flush

    flush()
    assert [s.name for s in receiver.spans if s.trace_id == TRACE] == []


def test_a_request_path_cannot_forge_a_line_of_the_access_log(tmp_path, caplog):
    """`fim serve`'s default text log writes `scope["path"]`, percent-decoded: a client with
    no key sends `%0A` and writes a second, forged access line (or `%1B` escapes to the
    operator's terminal). The logged path must hold no control characters."""
    write(
        tmp_path,
        {
            "fim.yaml": 'name: t\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-a]}\n',
            "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\n",
            "s.yaml": "- text: hi\n",
        },
    )
    forged = "/v1/x%0AINFO%20fim.access:%2010.0.0.9%20%22POST%20/v1/a%22%20200%1B]0;pwned%07"
    app = create_app(SnapshotHolder(compile_project(tmp_path)))
    with caplog.at_level(logging.INFO, logger="fim.access"), ServerThread(app) as srv:
        assert httpx.get(srv.url + forged).status_code == 401
    lines = [r.getMessage() for r in caplog.records if r.name == "fim.access"]
    assert lines, "no access line was logged"
    assert not any(ch in line for line in lines for ch in "\n\r\x1b\x07"), lines


async def test_tool_names_a_model_invents_do_not_displace_real_tools_in_metrics(tmp_path: Path):
    """The tool label set is capped at 200 names per process, first come first served; a
    model (any tenant's) calling 200 tools that do not exist fills it, and every real tool
    called afterwards, by anyone, is counted as `other`. Names of tools the agent does not
    have should go to one bucket, never into the capped set."""
    from fim.observe.metrics import Metrics
    from fim.testing.runs import run_events

    turns = "".join(
        "- tool_calls: ["
        + ", ".join(f"{{name: made_up_{t}_{i}, arguments: {{}}}}" for i in range(30))
        + "]\n"
        for t in range(7)
    )
    write(
        tmp_path,
        {
            "fim.yaml": 'name: t\nstate: "sqlite:///.fim/state.db"\n',
            "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\ntools: [calculator]\n"
            "max_iterations: 20\n",
            "s.yaml": turns
            + "- tool_calls: [{name: calculator, arguments: {expression: '1+1'}}]\n- text: ok\n",
        },
    )
    events = await run_events(compile_project(tmp_path), "a", "hi")
    metrics = Metrics()
    blocked: set[str] = set()
    for event in events:
        metrics.on("a", event, blocked)
    text = metrics.exposition()[0].decode()
    series = [line for line in text.splitlines() if line.startswith("fim_tool_calls_total")]
    assert any('tool="calculator"' in line for line in series), series


def test_a_tenant_sees_its_own_runs_in_the_status_and_not_why_a_reload_failed(tmp_path):
    """`GET /v1/status` counted every key's runs for any key (a side channel on other
    tenants' activity) and quoted the project's reload problems (its files) to tenants:
    a tenant's count is its own and a failed reload is said without its problems; an
    operator key sees everything."""
    from fim.errors import Problem
    from fim.server.callers import key_owner

    write(
        tmp_path,
        {
            "fim.yaml": "name: b\nserver: {api_keys: [key-a, key-b], operator_keys: [op]}\n",
            "agents/a.yaml": "description: d\nmodel: scripted:a.yaml\n",
            "a.yaml": "- text: hi\n",
        },
    )
    holder = SnapshotHolder(compile_project(tmp_path))
    app = create_app(holder)
    api = app.state.api
    api.active_runs += 2
    api.active_by_owner[key_owner(b"key-a")] += 2  # two of key A's runs going on
    holder.errors = [Problem("agents/a.yaml", 3, 1, "secret-ish detail of the project")]
    holder.error_at = 1.0
    with ServerThread(app) as srv:

        def status(key: str) -> dict[str, Any]:
            got = httpx.get(f"{srv.url}/v1/status", headers={"Authorization": f"Bearer {key}"})
            assert got.status_code == 200, got.text
            return got.json()

        a, b, op = status("key-a"), status("key-b"), status("op")
    assert (a["active_runs"], b["active_runs"], op["active_runs"]) == (2, 0, 2)
    assert "secret-ish" not in str(a) and "secret-ish" not in str(b)
    assert a["last_reload_error"]["problems"] == []
    assert "secret-ish" in op["last_reload_error"]["text"]
