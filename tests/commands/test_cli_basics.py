"""What a newcomer types first: `fim --version`, shell completion, the chat's /help."""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.cli import app, version

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def test_version_prints_the_distribution_version() -> None:
    from importlib.metadata import version as dist_version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"fim {dist_version('fim')}\n"
    assert version() == dist_version("fim")


def test_shell_completion_is_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    # prog_name as the installed script has it: otherwise click derives it from the test
    # process's sys.argv, which differs between pytest and its xdist workers. Without
    # typer's test variable `--show-completion` is a flag that detects the shell from the
    # process's ancestors, which failed now and then under xdist ("Shell  not supported");
    # with it, the shell named is the one shown.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = runner.invoke(app, ["--show-completion", "bash"], prog_name="fim")
    assert result.exit_code == 0, result.output
    assert (
        "_fim_completion" in result.stdout
        and "complete " in result.stdout
        and "COMP_WORDS" in result.stdout
    )
    assert "--install-completion" in runner.invoke(app, ["--help"]).stdout


def test_chat_help_reset_and_exit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fim run demo` without a prompt: /help lists the commands, /reset forgets, an unknown
    /command is not sent to the model, /exit leaves with 0."""
    from fim.build.compile import compile_project
    from fim.commands import run_async
    from fim.commands.run import _chat
    from fim.commands.run_view import EventPrinter

    lines: Iterator[str] = iter(["/help", "/nope", "What is 17 times 23?", "/reset", "/exit"])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(lines))
    snapshot = compile_project(REPO)
    code = run_async(_chat(snapshot, "demo", None, EventPrinter(), stream=False))
    out, err = capsys.readouterr()
    assert code == 0 and out == "17 \u00d7 23 = 391\n"
    assert "/help for commands" in err and "/reset   forget the conversation" in err
    assert "unknown command /nope (/help lists them)" in err and "(conversation cleared)" in err


def test_list_and_show_say_where_a_model_comes_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIM_MODEL", "ollama/qwen2.5")
    listed = runner.invoke(app, ["list", "models", "-p", str(REPO)], env={"COLUMNS": "200"})
    origin = "ollama/qwen2.5 - from FIM_MODEL (fim.yaml: openai/gpt-4o-mini)"
    assert re.search(rf"model +general +{re.escape(origin)}", listed.stdout)
    assert re.search(rf"model +fast +{re.escape(origin)}", listed.stdout)  # fast follows
    monkeypatch.setenv("FIM_FAST_MODEL", "openai/gpt-4o")
    shown = runner.invoke(app, ["show", "model", "fast", "-p", str(REPO)])
    assert shown.stdout.startswith("model: openai/gpt-4o\nfrom: 'FIM_FAST_MODEL (fim.yaml: ")


def test_every_command_summary_is_one_line_in_the_command_list() -> None:
    """`fim --help` lists each command with the first paragraph of its docstring, line
    breaks kept: a summary wrapped in the source shows up broken mid-sentence."""
    import typer.main

    wrapped = {}

    def visit(group: Any, path: str) -> None:
        ctx = group.context_class(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            summary = (command.short_help or command.help or "").strip().split("\n\n")[0]
            if "\n" in summary:
                wrapped[f"{path} {name}"] = summary
            if hasattr(command, "list_commands"):
                visit(command, f"{path} {name}")

    visit(typer.main.get_command(app), "fim")
    assert not wrapped, f"put a one-line summary first: {wrapped}"


def test_verbose_keeps_the_end_of_a_long_error_where_the_fix_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`fim run -v` shows a tool result on one line of at most 500 characters: an error's
    middle is cut, not its end ("... This is mcp 2.x: use MCPServer" was cut before
    the fix), an answer's end as before."""
    from fim.commands.run_view import EventPrinter
    from fim.events import ToolResultEvent

    printer = EventPrinter(verbose=True)
    said = "Traceback " + "x" * 800 + " FIX: import MCPServer"
    printer.show(ToolResultEvent(call_id="c", name="mcp", content=said, is_error=True))
    printer.show(ToolResultEvent(call_id="d", name="calc", content="y" * 800 + " END"))
    err = capsys.readouterr().err.replace("\n", "")
    assert "Traceback" in err and "FIX: import MCPServer" in err and " … " in err
    assert "END" not in err
