"""Preflight: what a run is certain to fail on, found before it starts anything."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.errors import RunError
from fim.run.preflight import check_agent, key_problem, local_endpoint, unreachable_problem


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def test_key_problem_names_the_variable_only_where_a_key_is_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = key_problem(ModelSettings(model="anthropic/claude-sonnet-4-5"))
    assert missing is not None and missing.message == (
        "missing API key for anthropic/claude-sonnet-4-5"
    )
    assert "set ANTHROPIC_API_KEY" in (missing.hint or "")
    for free in ("ollama/qwen2.5", "scripted:x.yaml", "hosted_vllm/m"):
        assert key_problem(ModelSettings(model=free)) is None
    local = ModelSettings(model="openai/m", api_base="http://127.0.0.1:1234/v1")
    assert key_problem(local) is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1234/v1")
    assert key_problem(ModelSettings(model="openai/gpt-4o-mini")) is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert key_problem(ModelSettings(model="openai/gpt-4o-mini")) is None


def test_a_local_endpoint_that_refuses_is_found_before_the_run(tmp_path: Path) -> None:
    port = _closed_port()
    down = ModelSettings(model="openai/local", api_base=f"http://127.0.0.1:{port}/v1")
    assert local_endpoint(down) == f"http://127.0.0.1:{port}/v1"
    assert local_endpoint(ModelSettings(model="ollama/qwen2.5")) == "http://localhost:11434/v1"
    assert local_endpoint(ModelSettings(model="openai/x", api_base="https://api.example")) is None
    error = unreachable_problem(down)
    assert error is not None
    assert error.message == f"openai/local: cannot connect to http://127.0.0.1:{port}/v1 " + (
        "(connection refused)"
    )
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        up = down.model_copy(update={"api_base": f"http://127.0.0.1:{listening.getsockname()[1]}"})
        assert unreachable_problem(up) is None

    snapshot = Snapshot(
        root=tmp_path,
        project=Project(name="p", mcp_servers={"gone": {"command": "no-such-mcp-binary"}}),
        agents={"a": AgentDecl(name="a", model=down, mcp=["gone"])},
        models={"general": ModelSettings(model="openai/gpt-4o-mini")},
    )
    with pytest.raises(RunError) as caught:
        check_agent(snapshot, snapshot.agents["a"])  # the MCP command first: it is certain
    assert caught.value.message == (
        "agent 'a': MCP server 'gone': command 'no-such-mcp-binary' not found"
    )
    with pytest.raises(RunError) as caught:
        check_agent(snapshot, snapshot.agents["a"], model="general")  # `fim run -m general`
    assert "missing API key for openai/gpt-4o-mini" in caught.value.message
