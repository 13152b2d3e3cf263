"""Eval assertions read the same in both tool modes.

In the default `progressive` mode the model calls a meta-tool (`connector`), and the call
runs the connector's action (`crm__get_order`): a `tool_called` written against the action
never matched. A tool call event carries the target hooks see (`target`,
`target_arguments`), and assertions match either the name the model used or the target.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.config.schema import Assertion
from fim.eval.assertions import Observed, check
from fim.events import ToolCallEvent
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events
from tests.http_stubs import Quiet, answer, serving


class Orders(Quiet):
    def do_GET(self) -> None:
        answer(self, b'{"id": "1001", "status": "shipped"}')


def project(root: Path, url: str, mode: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "connectors").mkdir()
    (root / "fim.yaml").write_text(f"name: t\ntool_modes: {{connectors: {mode}}}\n")
    (root / "connectors" / "crm.yaml").write_text(
        f"kind: http\ndescription: CRM\nbase_url: {url}\nactions:\n"
        "  get_order: {description: Fetch an order, method: GET, path: '/orders/{id}',"
        " parameters: {type: object, properties: {id: {type: string}}, required: [id]}}\n"
    )
    (root / "s.yaml").write_text("- text: unused\n")  # the test hands its own model in
    (root / "agents" / "desk.yaml").write_text(
        "description: answers order questions\nmodel: scripted:s.yaml\nconnectors: [crm]\n"
    )
    return root


async def no_judge(*_: Any) -> tuple[bool, str]:
    raise AssertionError("no judge here")


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
async def test_a_tool_called_assertion_names_the_action_in_either_mode(
    tmp_path: Path, mode: str
) -> None:
    server: type[BaseHTTPRequestHandler] = Orders
    with serving(server) as srv:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        snapshot = compile_project(project(tmp_path / "p", url, mode))
        call = (
            tool_call(
                "connector",
                {
                    "subcommand": "execute",
                    "connector": "crm",
                    "action": "get_order",
                    "parameters": {"id": "1001"},
                },
            )
            if mode == "progressive"
            else tool_call("crm__get_order", {"id": "1001"})
        )
        model = ScriptedModel([call, text("shipped")])
        events = await run_events(snapshot, "desk", "where is 1001?", model=model)
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    seen = Observed(output="shipped", events=calls)
    for spec in (
        {"tool_called": {"name": "crm__get_order", "args": {"id": "1001"}}},
        {"tool_sequence": {"tools": ["crm__get_order"], "mode": "exact"}},
    ):
        outcome = await check(Assertion.model_validate(spec), seen, no_judge, "p")
        assert outcome.passed, outcome.message
    wrong = {"tool_called": {"name": "crm__get_order", "args": {"id": "9"}}}
    assert not (await check(Assertion.model_validate(wrong), seen, no_judge, "p")).passed
    if mode == "progressive":
        assert calls[0].name == "connector" and calls[0].target == "crm__get_order"
        assert calls[0].target_arguments == {"id": "1001"}
