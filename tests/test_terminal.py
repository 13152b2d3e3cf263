"""Text someone else wrote reaches the terminal shown, never obeyed: on a rich console that
includes its `:name:` emoji codes (attack-55 F5: a tool's `root:x:0` read `root❌0` in
`fim runs show`). Every console fim prints on comes from `fim.terminal.rich_console`."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from fim.terminal import markup, rich_console

FIM = Path(__file__).parents[1] / "fim"


def test_a_rich_console_prints_emoji_codes_as_they_are():
    out = io.StringIO()
    rich_console(file=out, width=200).print(markup("root:x:0:0 and :smile: [bold]b[/bold]"))
    assert out.getvalue() == "root:x:0:0 and :smile: [bold]b[/bold]\n"


def test_no_console_is_made_anywhere_else():
    made = [
        f"{path.relative_to(FIM)}:{node.lineno}"
        for path in FIM.rglob("*.py")
        if path.name != "terminal.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "Console"
    ]
    assert made == []
