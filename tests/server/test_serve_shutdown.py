"""A stopping `fim serve` (SIGTERM, as in a rolling upgrade) waits `server.shutdown_timeout`
seconds (`--shutdown-timeout` wins) for the runs in flight, saying so in one log line. A
run still going then is cut: its caller gets a 503 `server_shutting_down`, not a 499
blaming the client, and its record says the server stopped before it ended. A run that had
called no tool gets `Retry-After: 1` (the OpenAI SDKs retry it: nothing is done twice); one
that had called a tool gets `x-should-retry: false` (a retry would call it again), and its
message says the run did work before it was cut (attack-44).

The model never answers, so the run is always still going when the bound is reached: no
clock is read or asserted."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.errors import ConfigError
from fim.server import deploy_options
from fim.server.app import create_app
from fim.testing.cluster import until
from fim.testing.model_server import OpenAIStubServer
from fim.testing.server import ServerThread, fim_server
from fim.testing.stub_wire import completion


def project(root: Path, stub_url: str, server_yaml: str = "") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(f"name: stopping\n{server_yaml}")
    (root / "agents" / "slow.yaml").write_text(
        "description: never answered\n"
        f"model: {{model: openai/stub, api_base: '{stub_url}', api_key: x}}\n"
        "tools: [calculator]\n"
    )
    return root


def cut_by_the_stop(root: Path, waiting: Callable[[], bool]) -> tuple[httpx.Response, str]:
    """The answer to a run the server's stop cuts once it `waiting` on the model (which never
    answers), and the server's log."""
    flags = ("--shutdown-timeout", "0.2", "--log-level", "info")
    with fim_server(root, *flags) as (url, proc):
        answer: dict[str, Any] = {}

        def call() -> None:
            answer["response"] = httpx.post(
                f"{url}/v1/agents/slow/runs", json={"input": "hi"}, timeout=60
            )

        caller = threading.Thread(target=call)
        caller.start()
        until(waiting)
        proc.send_signal(signal.SIGTERM)
        caller.join(timeout=60)
        assert proc.wait(timeout=60) == 0
    return answer["response"], next(root.glob("serve-*.log")).read_text()


class CallsATool(OpenAIStubServer):
    """A model that calls `calculator` once, then never answers."""

    def __init__(self) -> None:
        super().__init__(handler=self.reply)

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        self.hang_next()  # the run's next request, after the tool ran, is never answered
        return completion(None, [("c1", "calculator", '{"expression": "6*7"}')], "m")


def test_a_run_cut_by_the_stop_is_a_503_to_retry_and_its_record_says_why(
    tmp_path: Path,
) -> None:
    with OpenAIStubServer() as stub:
        stub.hang_next()
        # fim.yaml's bound would outlast the test: the flag's wins
        root = project(tmp_path / "p", stub.base_url, "server: {shutdown_timeout: 3600}\n")
        response, log = cut_by_the_stop(root, lambda: len(stub.requests) >= 1)
        assert len(stub.requests) == 1  # no tool was called: a retry repeats nothing

    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "1"
    assert "x-should-retry" not in response.headers
    problem = response.json()["error"]
    assert problem["code"] == "server_shutting_down" and problem["type"] == "server_error"
    assert "the server is stopping" in problem["message"]
    assert "client disconnected" not in response.text
    assert "stopping: waiting up to 0.2 s for 1 run in flight" in log
    assert "CTRL+C" not in log  # uvicorn's hint means nothing under an orchestrator

    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        (run,) = httpx.get(f"{srv.url}/v1/runs").json()["runs"]
        record = httpx.get(f"{srv.url}/v1/runs/{run['id']}").json()
    assert record["status"] == "cancelled"
    assert record["data"]["error"] == "the server stopped before it ended"


def test_a_run_cut_after_it_called_a_tool_is_a_503_the_sdks_do_not_retry(
    tmp_path: Path,
) -> None:
    """The OpenAI SDKs retry a 503 with `Retry-After` from the start: the tool the run had
    called (an email, a ticket, a payment) would be called again on another replica."""
    with CallsATool() as stub:
        root = project(tmp_path / "p", stub.base_url)
        response, _ = cut_by_the_stop(root, lambda: len(stub.requests) >= 2)
        assert len(stub.requests) == 2  # the tool ran, then the model was asked again

    assert response.status_code == 503, response.text
    assert response.headers["x-should-retry"] == "false"
    assert "Retry-After" not in response.headers
    problem = response.json()["error"]
    assert problem["code"] == "server_shutting_down"
    assert "after the run had called tools" in problem["message"]
    assert "calls them again" in problem["message"]


def test_the_bound_comes_from_fim_yaml_unless_a_flag_is_given(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "http://127.0.0.1:9/v1", "server: {shutdown_timeout: 75}\n")
    settings = compile_project(root).project.server
    assert deploy_options(settings, None, None, None)[0] == 75
    assert deploy_options(settings, 5, None, None)[0] == 5
    default = project(tmp_path / "d", "http://127.0.0.1:9/v1")
    assert compile_project(default).project.server.shutdown_timeout == 30


def test_a_negative_bound_is_refused_naming_the_field(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "http://127.0.0.1:9/v1", "server: {shutdown_timeout: -1}\n")
    with pytest.raises(ConfigError) as caught:
        compile_project(root)
    assert "shutdown_timeout" in str(caught.value) and "fim.yaml:2:" in str(caught.value)


def test_a_dag_run_past_its_plan_counts_as_having_called_tools() -> None:
    """A `dag` run's steps start their tools in the loop pass that queues their events, so
    its trace may show no call yet when the stop cuts it (attack-45 F2): past its plan, a
    retry could call them again."""
    from fim.server.stopping import called_tools

    started = {"type": "run_started", "engine": "dag"}
    planned = {"type": "llm_call"}
    assert not called_tools([started])
    assert called_tools([started, planned])
    assert not called_tools([{"type": "run_started", "engine": "react"}, planned])
    assert called_tools(
        [{"type": "run_started", "engine": "react"}, planned, {"type": "tool_call"}]
    )
