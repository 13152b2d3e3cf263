"""Hostile input that is not model-written but still untrusted: a fetched page.

The standard library's HTML parser is quadratic on crafted markup (50 KB of `<a <a ...`
took 15 s, on the event loop, before web_fetch read pages in a killable worker).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fim.config.schema import Project, WebFetchSettings
from fim.tools import sandbox
from fim.tools.builtin import json_transform, web_fetch
from fim.tools.registry import ToolRegistry
from fim.types import ToolResult
from tests.conftest import Ticker
from tests.mcp_servers.costly import costly_schema, deep_value
from tests.tools.test_limits import LIMIT, _stopped
from tests.tools.test_tools_builtin import make_ctx, registry_for

HOSTILE = b"<html><title>x</title><body>" + b"<a " * 40_000


class _Hostile(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(HOSTILE)))
        self.end_headers()
        self.wfile.write(HOSTILE)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def hostile_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


async def test_a_page_crafted_to_stall_the_html_parser_is_stopped_off_the_loop(
    tmp_path: Path, hostile_site: str, ticker: Ticker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_fetch, "RENDER_TIMEOUT", LIMIT)
    project = Project(web_fetch=WebFetchSettings(allow_hosts=["127.0.0.1"]))
    tools = registry_for(make_ctx(tmp_path, project, tools=["web_fetch"]))
    result = await _stopped(tools.call("web_fetch", {"url": hostile_site}), ticker)
    assert "too costly to read" in result.content


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap is not installed")
async def test_a_sandbox_cannot_fill_the_disk_with_many_files_under_the_size_limit(
    tmp_path: Path,
) -> None:
    """RLIMIT_FSIZE caps one file; a loop writing many of them filled the host's disk
    (scratch/ is a host folder, and its files outlive the call)."""
    scratch = tmp_path / "scratch"
    limits = sandbox.Limits(timeout=20, disk_mb=16, max_file_bytes=8 * 1024 * 1024)
    write = "for i in $(seq 1 40); do head -c 8000000 /dev/zero > f$i; sync f$i; done; echo all"
    outcome = await sandbox.run(["bash", "-c", write], scratch=scratch, limits=limits)
    assert outcome.disk_exceeded and not outcome.timed_out
    assert b"all" not in outcome.stdout.data
    written = sum(f.stat().st_size for f in scratch.iterdir())
    assert written < 40 * 8_000_000 // 2  # stopped early, not after the loop
    shown = sandbox.observation(outcome, limit=20, memory_mb=512, max_output=100, fix="", empty="")
    assert isinstance(shown, ToolResult) and "wrote more to disk" in shown.content


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap is not installed")
async def test_parallel_sandbox_calls_share_a_bounded_number_of_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One model turn may ask for many `shell` calls at once; each tree may use its full
    memory limit, so the process runs at most MAX_CONCURRENT of them together."""
    monkeypatch.setattr(sandbox, "MAX_CONCURRENT", 2)
    scratch = tmp_path / "scratch"
    count = "d=$(mktemp -d in/XXXXXX); ls in | wc -l; sleep 0.3; rmdir $d"
    calls = [
        sandbox.run(["bash", "-c", f"mkdir -p in; {count}"], scratch=scratch) for _ in range(4)
    ]
    outcomes = await asyncio.gather(*calls)
    seen = [int(o.stdout.text()) for o in outcomes]
    assert all(o.returncode == 0 for o in outcomes) and max(seen) <= 2, seen


async def test_deeply_nested_arguments_are_refused_before_anything_walks_them() -> None:
    """A 900-level document for json_transform crashed pebble's scheduler thread while it
    pickled the call for the worker: the call hung past its 5 s limit (until the engine's
    tool timeout). Arguments nested deeper than the HTTP body cap are now refused."""
    deep: Any = "x"
    for _ in range(900):
        deep = {"a": deep}
    tools = ToolRegistry([json_transform.TOOL])
    result = await tools.call("json_transform", {"data": deep})
    assert result.is_error and "nested more than 64 levels deep" in result.content
    shallow = {"a": {"b": [1, 2, {"c": 3}]}}
    fine = await tools.call("json_transform", {"data": shallow, "path": "$.a.b[2].c"})
    assert not fine.is_error and fine.content.strip() == "3", fine.content


def _deep_answer(depth: int) -> str:
    return json.dumps(deep_value(depth))


async def test_a_callers_costly_response_schema_is_checked_off_the_loop(
    ticker: Ticker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`response_format` is the caller's: checking the model's answer against it runs in
    a killable worker with a deadline, and the run fails saying why; the loop goes on."""
    from fim.engines import react
    from fim.structured import OutputContract

    monkeypatch.setattr(react, "CHECK_SECONDS", LIMIT)
    contract = OutputContract(costly_schema(13), untrusted=True)
    engine = engine_with([_deep_answer(13)] * 2, finalizer=contract)
    events = await _run_ticking(engine, ticker)
    assert events[-1].status == "error"
    assert "too costly to check" in events[-1].output
    trusted = OutputContract({"type": "object", "required": ["a"]})
    ok = [event async for event in engine_with([_deep_answer(3)], trusted).run("answer")]
    assert ok[-1].status == "ok" and json.loads(ok[-1].output)["a"]


def engine_with(answers: list[str], finalizer: Any) -> Any:
    from fim.engines.react import ReactEngine
    from fim.llm.script import text
    from fim.llm.scripted import ScriptedModel

    return ReactEngine(
        model=ScriptedModel([text(a) for a in answers]),
        registry=ToolRegistry([]),
        system_prompt="Answer in JSON.",
        agent="a",
        run_id="r",
        finalizer=finalizer,
    )


async def _run_ticking(engine: Any, ticker: Ticker) -> list[Any]:
    before = ticker.ticks
    events = [event async for event in engine.run("answer")]
    assert ticker.ticks >= before + 3  # the loop went on while the answer was checked
    return events


def test_a_costly_response_format_over_the_openai_surface_fails_the_run_not_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The surface a caller's schema arrives on: `/v1/chat/completions` marks it the
    caller's, so the answer is checked in a worker; the request fails with the reason and
    the server answers others meanwhile."""
    import httpx

    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.engines import react
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    monkeypatch.setattr(react, "CHECK_SECONDS", LIMIT)
    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text('name: rf\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "agents" / "json.yaml").write_text("model: scripted:json.yaml\n")
    answer = json.dumps(_deep_answer(13))
    (tmp_path / "json.yaml").write_text(f"- text: {answer}\n- text: {answer}\n")
    body = {
        "model": "json",
        "messages": [{"role": "user", "content": "answer"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "costly", "schema": costly_schema(13)},
        },
    }
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        replies: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: replies.append(
                httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=60)
            )
        )
        thread.start()
        while thread.is_alive():  # the loop answers while the answer is checked
            assert httpx.get(f"{srv.url}/healthz", timeout=5).status_code == 200
            thread.join(0.05)
    assert replies[0].status_code >= 400
    assert "too costly to check" in replies[0].text
