"""Small ones of newcomer-54 (#15).

- `fim show agent X --prompt` said `(1 tool: get_price; also resources and prompts)` of a
  server with neither: FastMCP declares both capabilities for every server. The line now
  says what the server lists: nothing more for a tools-only server, `also resources and
  prompts` for one that has them.
- `fim-model-server --help` ended with `(newcomer-53 #11)`, an internal review reference;
  no `--help` of `fim` or `fim-model-server` carries one.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from fim.cli import app
from fim.testing.model_server import main as model_server

SERVERS = Path(__file__).parents[1] / "mcp_servers"
INTERNAL = re.compile(r"newcomer-\d+|attack-\d+|newcomer54|attack\d+ F\d")


def test_show_prompt_says_only_what_each_mcp_server_has(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: shop\nmcp_servers:\n"
        f"  inventory: {{command: {sys.executable}, args: [{SERVERS / 'stock54.py'}]}}\n"
        f"  demo: {{command: {sys.executable}, args: [{SERVERS / 'demo.py'}]}}\n"
    )
    (root / "agents" / "shop.yaml").write_text("model: scripted:s.yaml\nmcp: [inventory, demo]\n")
    (root / "s.yaml").write_text("- text: ok\n")

    shown = CliRunner().invoke(app, ["show", "agent", "shop", "--prompt", "-p", str(root)])

    assert shown.exit_code == 0, shown.output
    lines = {line.split(":")[0]: line for line in shown.output.splitlines() if line[:2] == "- "}
    assert lines["- inventory"].endswith("(1 tool: get_stock)")  # neither: nothing claimed
    assert lines["- demo"].endswith("; also resources and prompts)")


def _helps() -> dict[str, str]:
    """Every `fim` command's `--help`, by its command line."""
    runner = CliRunner()
    found: dict[str, str] = {}

    def walk(command: Any, path: list[str]) -> None:
        found[" ".join(["fim", *path])] = runner.invoke(
            app, [*path, "--help"], terminal_width=200
        ).output
        if isinstance(command, TyperGroup):  # typer's own click, not `click`'s
            ctx = command.context_class(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, [*path, name])

    walk(get_command(app), [])
    return found


def test_no_fim_help_names_an_internal_review() -> None:
    helps = _helps()
    assert len(helps) >= 40 and "fim mcp serve" in helps
    assert {
        line: INTERNAL.findall(text) for line, text in helps.items() if INTERNAL.search(text)
    } == {}


def test_fim_model_server_help_names_no_internal_review(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        model_server(["--help"])
    text = capsys.readouterr().out
    assert "python -m fim.testing.model_server" in text and not INTERNAL.search(text)
