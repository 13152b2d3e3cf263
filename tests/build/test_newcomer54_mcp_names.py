"""The name a scripted step calls an MCP tool by, as `fim validate`, `fim mcp tools` and
the run see it (newcomer-54 #3).

`fim mcp tools inventory` printed `inventory__get_stock`, "the name the model calls", and
`fim validate` passed a script calling it; in the default progressive mode the model has
the `mcp` meta-tool only, so the run answered "there is no tool named
'inventory__get_stock'" and still ended `ok`. Now validate warns at the step's `name:`
with the call the mode wants, `fim mcp tools` says how the agents using the server call
its tools, and a legacy-mode agent's script calling `mcp` is a warning too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app

STOCK = Path(__file__).parents[1] / "mcp_servers" / "stock54.py"
BY_NAME = "- tool_calls: [{name: inventory__get_stock, arguments: {sku: SKU-1}}]\n- text: ok\n"
THROUGH_MCP = (
    "- tool_calls: [{name: mcp, arguments: {subcommand: call, server: inventory, "
    "tool: get_stock, parameters: {sku: SKU-1}}}]\n- text: ok\n"
)


def project(root: Path, script: str, modes: str = "") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        f"name: shop\nmcp_servers:\n  inventory: {{command: {sys.executable}, args: [{STOCK}]}}\n"
    )
    (root / "agents" / "shop.yaml").write_text(
        f"model: scripted:shop.script.yaml\nmcp: [inventory]\n{modes}"
    )
    (root / "shop.script.yaml").write_text(script)
    return root


def fim(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def default_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIM_MCP_TOOL_MODE", raising=False)


def test_validate_warns_at_a_progressive_agents_call_by_the_legacy_name(tmp_path: Path):
    root = project(tmp_path / "p", BY_NAME)
    _code, out = fim("validate", "-p", str(root))
    assert "shop.script.yaml:1:" in out, out
    assert (
        "agent 'shop' calls MCP tools through `mcp` in progressive mode: its run answers "
        "'inventory__get_stock' with 'there is no tool named'"
    ) in out
    assert (
        "write {name: mcp, arguments: {subcommand: call, server: inventory, tool: get_stock, "
        "parameters: {...}}}, or set tool_modes: {mcp: legacy} on the agent"
    ) in out


def test_validate_takes_each_modes_own_call(tmp_path: Path):
    through = project(tmp_path / "a", THROUGH_MCP)
    assert "no tool named" not in fim("validate", "-p", str(through))[1]
    legacy = project(tmp_path / "b", BY_NAME, "tool_modes: {mcp: legacy}\n")
    assert "no tool named" not in fim("validate", "-p", str(legacy))[1]
    wrong = project(tmp_path / "c", THROUGH_MCP, "tool_modes: {mcp: legacy}\n")
    _code, out = fim("validate", "-p", str(wrong))
    assert "shop.script.yaml:1:" in out and "calls MCP tools by name in legacy mode" in out


def test_the_run_agrees_with_validate(tmp_path: Path):
    """What validate passes, the run calls; what it warns of, the run refuses."""
    ok = project(tmp_path / "a", THROUGH_MCP)
    code, out = fim("run", "shop", "SKU-1?", "-v", "-p", str(ok))
    assert code == 0 and "SKU-1: 12 in stock." in out, out
    refused = project(tmp_path / "b", BY_NAME)
    code, out = fim("run", "shop", "SKU-1?", "-v", "-p", str(refused))
    assert "there is no tool named 'inventory__get_stock'" in out


def test_mcp_tools_says_how_the_agents_model_calls_them(tmp_path: Path):
    root = project(tmp_path / "p", THROUGH_MCP)
    code, out = fim("mcp", "tools", "inventory", "-p", str(root))
    assert code == 0, out
    first, *rows = out.splitlines()
    assert first.startswith("agent shop (progressive mode) calls these through the `mcp` tool: ")
    assert '"server": "inventory", "tool": "<tool>"' in first
    assert "(with tool_modes: {mcp: legacy}, as inventory__<tool>)" in first
    assert any(row.startswith("get_stock  Return how many") for row in rows), rows
    legacy = project(tmp_path / "l", BY_NAME, "tool_modes: {mcp: legacy}\n")
    code, out = fim("mcp", "tools", "inventory", "-p", str(legacy))
    assert out.splitlines()[0].startswith("inventory__get_stock  Return how many"), out
