"""Newcomer 49's findings at run time and in the checks behind `fim validate`'s warnings:
an HTTP connector that cannot send (an empty `base_url`) says so as a configuration error
without retrying, a misspelt model name is warned about with the listed name, an eval case
whose workflow inputs are invalid is a configuration ERROR (exit 2), and a node attribute
typo is said at run time as `fim validate` says it."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.model_checks import model_name_warnings
from fim.config.schema import HttpConnector
from fim.connectors import http_fetch
from fim.connectors.http import HttpConnectorClient
from fim.llm import catalog
from tests.inprocess_cli import run_fim


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


# ------------------------------------------- a connector that cannot send (item 2)


def connector(base_url: str) -> HttpConnectorClient:
    decl = HttpConnector.model_validate(
        {"kind": "http", "base_url": base_url, "retries": 2, "actions": {"list": {"path": "/"}}}
    )
    return HttpConnectorClient("petstore", decl)


@pytest.mark.parametrize(
    ("base_url", "why"),
    [
        ("", "its base_url '' is empty"),
        ("/api/v3", "its base_url '/api/v3' does not start with http:// or https://"),
        ("http://", "its base_url 'http://' names no host"),
    ],
)
def test_a_base_url_no_request_can_go_to_is_a_configuration_error_at_once(
    base_url: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[int] = []

    async def attempt(self: Any, action: Any, request: Any) -> Any:
        attempts.append(1)
        raise AssertionError("nothing may be sent")

    monkeypatch.setattr(http_fetch.Fetcher, "_attempt", attempt)
    result = asyncio.run(connector(base_url).call("list", {}))
    assert result.is_error and attempts == []
    assert result.content == (
        f"Error: petstore__list: connector 'petstore' is misconfigured: {why}. This is a "
        "configuration error, not the service being down: do not retry; the connector's "
        "base_url (or the variable it reads) must be fixed, and `fim validate` shows where."
    )


def test_an_unsupported_protocol_is_not_retried_and_not_blamed_on_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts: list[int] = []

    async def attempt(self: Any, action: Any, request: Any) -> Any:
        attempts.append(1)
        raise httpx.UnsupportedProtocol("Request URL is missing an 'http://' or 'https://'")

    monkeypatch.setattr(http_fetch.Fetcher, "_attempt", attempt)
    result = asyncio.run(connector("https://petstore.example.com").call("list", {}))
    assert len(attempts) == 1  # `retries: 2` retries a connect failure, not this
    assert result.is_error
    assert "is misconfigured: the request URL is not an http(s) URL" in result.content
    assert "may be down" not in result.content


def test_a_connect_failure_is_still_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[int] = []

    async def attempt(self: Any, action: Any, request: Any) -> Any:
        attempts.append(1)
        raise httpx.ConnectError("refused")

    monkeypatch.setattr(http_fetch.Fetcher, "_attempt", attempt)
    monkeypatch.setattr(http_fetch, "RETRY_BACKOFF", 0.0)
    result = asyncio.run(connector("https://petstore.example.com").call("list", {}))
    assert len(attempts) == 3
    assert "The service may be down" in result.content


# ------------------------------------------------- a misspelt model name (item 4)


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\n"
        'state: "sqlite:///.fim/state.db"\n'
        "models:\n"
        "  general: openai/gpt-4o-minii\n"
        "  fast: {model: ollama/qwen2.55}\n"
    )
    (root / "agents" / "a.yaml").write_text("model: anthropic/claude-sonet-4-5\n")
    (root / "agents" / "b.yaml").write_text("model: general\n")
    (root / "agents" / "c.yaml").write_text(
        "model: {model: openai/gpt-4o-minii, api_base: 'http://127.0.0.1:9/v1'}\n"
    )
    (root / "agents" / "d.yaml").write_text("model: anthropic/claude-sonnet-4-5\n")
    return root


def test_a_misspelt_model_name_is_warned_about_with_the_listed_name(models: Path) -> None:
    if not catalog.table():
        pytest.skip("litellm's price table is not installed")
    found = model_name_warnings(compile_project(models), catalog.table)
    assert [str(p) for p in found] == [
        "fim.yaml:4:12: model 'openai/gpt-4o-minii' is not in litellm's model table (did you "
        "mean 'openai/gpt-4o-mini'? a model newer than the table is fine as it is)",
        "agents/a.yaml:1:8: model 'anthropic/claude-sonet-4-5' is not in litellm's model "
        "table (did you mean 'anthropic/claude-sonnet-4-5'? a model newer than the table is "
        "fine as it is)",
    ]


def test_a_gateway_for_the_provider_is_not_second_guessed(
    models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    found = model_name_warnings(compile_project(models), catalog.table)
    assert [p.path for p in found] == ["agents/a.yaml"]


def test_the_table_is_read_only_for_a_model_of_a_listed_provider(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "agents" / "a.yaml").write_text("model: scripted:s.yaml\n")
    (root / "agents" / "b.yaml").write_text("model: ollama/qwen2.5\n")

    def table() -> Mapping[str, Any]:
        raise AssertionError("read")

    assert model_name_warnings(compile_project(root), table) == []


# --------------------------------------------- a workflow eval case's inputs (item 5)


def test_an_eval_case_whose_inputs_the_workflow_refuses_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    for folder in ("workflows", "evals"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "workflows" / "tip.yaml").write_text(
        "inputs:\n  bill: {type: number}\n"
        "nodes:\n  tip: {type: tool, tool: calculator, args: {expression: '{{ inputs.bill }}'}}\n"
    )
    (root / "evals" / "tip.yaml").write_text(
        "workflow: tip\n"
        "cases:\n"
        "  - name: from vars\n"
        "    vars: {b: eighty}\n"  # known only once rendered: validate checks the name only
        "    input: {bill: '{{ b }}'}\n"
        "    expect: [{contains: '80'}]\n"
    )
    assert fim(root, "validate").returncode == 0
    done = fim(root, "eval")
    assert done.returncode == 2, done.stdout
    assert "ERROR" in done.stdout
    assert "invalid inputs for workflow 'tip': input 'bill' = 'eighty': expected a number" in (
        done.stdout
    )


# ------------------------------------------------- a node attribute typo (item 6)


def test_a_node_attribute_typo_is_said_at_run_time_as_validate_says_it() -> None:
    # deferred: the run-time renderer, as a workflow run loads it
    from fim.workflows import templates

    scope = {"nodes": {"tip": templates.NodeScope("tip", "12", "ok")}}
    with pytest.raises(templates.TemplateError) as caught:
        templates.render("{{ nodes.tip.outptu | float }}", scope)
    assert str(caught.value) == (
        "template ' nodes.tip.outptu | float ': nodes.tip has no 'outptu' (did you mean "
        "'output'? a node has output and status)"
    )
    assert templates.render("{{ nodes.tip.output | float }}", scope) == 12.0
    with pytest.raises(templates.TemplateError, match="nodes are only visible once they"):
        templates.render("{{ nodes.tipp.output }}", scope)


def test_a_workflow_run_names_the_node_attribute_it_lacks(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "workflows" / "tip.yaml").write_text(
        "nodes:\n"
        "  tip: {type: tool, tool: calculator, args: {expression: '80 * 0.15'}}\n"
        "  split:\n"
        "    type: tool\n"
        "    tool: calculator\n"
        "    needs: [tip]\n"
        '    args: {expression: \'{{ nodes.tip["outp" ~ "tu"] }} / 3\'}\n'  # not static
    )
    assert fim(root, "validate").returncode == 0
    done = fim(root, "workflow", "run", "tip")
    assert done.returncode != 0
    assert "nodes.tip has no 'outptu' (did you mean 'output'? a node has output and status)" in (
        done.stdout + done.stderr
    )
