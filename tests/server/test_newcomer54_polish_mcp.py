"""The MCP surface for a person and for a client choosing what to expose (newcomer-54 #11).

- A progress notification's `message` is one line a person reads (Claude Code and the MCP
  Inspector show it): `calling calculator {"expression": "6*7"}`, not the event's JSON,
  which rides in the notification's `_meta` under `fim/event`. Both are masked.
- A tool that cannot write says so (`readOnlyHint: true`): an agent with `read_only: true`,
  and every agent and workflow of a project with `read_only: true`. No other tool claims
  anything.
- `fim mcp serve --agent NAME` (repeatable) serves only the agents and workflows named; a
  name that is neither is refused before the client connects, with a did-you-mean.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types

from fim.build.compile import compile_project
from fim.events import RunFinished, ToolCallEvent
from fim.masking import remember
from fim.server.mcp_progress import LINE_MAX, META_KEY, event_line
from fim.server.mcp_surface import _Progress, list_tools

REPO = Path(__file__).resolve().parents[2]
SECRET = "n54-polish-s3cret-7781"


def write_project(root: Path, *, project_read_only: bool = False) -> Path:
    files = {
        "fim.yaml": "name: shop\n" + ("read_only: true\n" if project_read_only else ""),
        "agents/clerk.yaml": (
            "description: Answers questions about stock\n"
            "model: scripted:calc.script.yaml\ntools: [calculator]\nread_only: true\n"
        ),
        "agents/buyer.yaml": (
            "description: Places orders\nmodel: scripted:calc.script.yaml\ntools: [calculator]\n"
        ),
        "calc.script.yaml": (
            '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n'
            '- text: "It is 42."\n'
        ),
        "workflows/compute.yaml": (
            "description: Computes an expression\n"
            "inputs:\n  expression: {type: string}\n"
            "nodes:\n  calc: {type: tool, tool: calculator, "
            'args: {expression: "{{ inputs.expression }}"}}\n'
            'outputs:\n  result: "{{ nodes.calc.output }}"\n'
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


# --------------------------------------------------------------------------- progress


def test_a_progress_message_is_a_line_for_a_person_and_the_event_is_in_meta() -> None:
    sent: list[types.ProgressNotification] = []

    async def send_notification(note: Any, related_request_id: Any = None) -> None:
        assert related_request_id == 7  # on the stream of the call it is about
        sent.append(note)

    ctx = SimpleNamespace(
        meta={"progress_token": "tok-1"},
        request_id=7,
        session=SimpleNamespace(send_notification=send_notification),
    )
    call = ToolCallEvent(
        run_id="r1",
        call_id="c1",
        name="mcp",
        arguments={"subcommand": "call"},
        target="inventory.get_stock",
        target_arguments={"sku": "SKU-1"},
    )
    remember([SECRET])
    finished = RunFinished(run_id="r1", output=f"Stock is 4.\nkey {SECRET}", status="ok")
    asyncio.run(_Progress(ctx)(call))
    asyncio.run(_Progress(ctx)(finished))

    first, last = (note.params for note in sent)
    assert first.progress_token == "tok-1"
    assert first.message == 'calling inventory.get_stock {"sku": "SKU-1"}'
    assert first.meta is not None
    event = first.meta[META_KEY]
    assert event["type"] == "tool_call" and event["target_arguments"] == {"sku": "SKU-1"}
    assert "run_id" not in event  # the call's result carries it
    assert last.message == "run finished: ok"
    assert last.meta is not None and SECRET not in str(last.meta[META_KEY])
    assert "***" in last.meta[META_KEY]["output"]


def test_a_progress_line_is_one_line_masked_and_capped() -> None:
    remember([SECRET])
    call = ToolCallEvent(
        run_id="r1", call_id="c1", name="lookup", arguments={"q": f"{SECRET}\n" + "x" * 900}
    )
    line = event_line(call)
    assert "\n" not in line and SECRET not in line and len(line) <= LINE_MAX
    assert line.startswith('calling lookup {"q": "***')


# --------------------------------------------------------------------------- annotations


def _annotations(root: Path) -> dict[str, Any]:
    tools = list_tools(compile_project(root))
    return {t.name: t.annotations for t in tools}


def test_a_read_only_agent_is_a_read_only_tool_and_no_other_tool_claims_it(
    tmp_path: Path,
) -> None:
    shown = _annotations(write_project(tmp_path / "p"))
    assert shown["clerk"] == types.ToolAnnotations(read_only_hint=True)
    assert shown["buyer"] is None and shown["compute"] is None


def test_in_a_read_only_project_every_tool_is_read_only(tmp_path: Path) -> None:
    shown = _annotations(write_project(tmp_path / "p", project_read_only=True))
    assert {name: a.read_only_hint if a else None for name, a in shown.items()} == {
        "clerk": True,
        "buyer": True,
        "compute": True,
    }


# --------------------------------------------------------------------------- --agent


def _serve(root: Path, *flags: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "fim.cli", "--project", str(root), "mcp", "serve", "--no-reload", *flags],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=str(root),
    )


def test_fim_mcp_serve_agent_serves_only_the_agents_and_workflows_named(tmp_path: Path) -> None:
    from mcp import Client

    root = write_project(tmp_path / "p")

    async def main() -> tuple[set[str], Any, list[str]]:
        lines: list[str] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            lines.append(message or "")

        async with Client(_serve(root, "--agent", "clerk", "--agent", "compute")) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            hidden = await client.call_tool("buyer", {"input": "order 3"})
            await client.call_tool("clerk", {"input": "6*7?"}, progress_callback=on_progress)
            return names, hidden, lines

    names, hidden, lines = asyncio.run(asyncio.wait_for(main(), 90))
    assert names == {"clerk", "compute"}
    assert hidden.is_error and "unknown tool 'buyer'" in hidden.content[0].text
    assert lines[0] == "run started: agent 'clerk'" and lines[-1] == "run finished: ok"


def test_fim_mcp_serve_agent_refuses_a_name_it_does_not_have(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    done = subprocess.run(
        [sys.executable, "-m", "fim.cli", "-p", str(root), "mcp", "serve", "--agent", "clerck"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "error: --agent clerck: no agent or workflow of that name (did you mean 'clerk'?)" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr
