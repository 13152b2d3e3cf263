"""What the project's Python prints never reaches fim's stdout (newcomer-50 #1).

Every ADK and openai-agents tutorial tool prints (`print(f"--- Tool: get_weather called
for city: {city} ---")`). fim's stdout is an answer a program reads: `fim run --json`'s
events, `fim eval --json -`'s report, a plain answer sent to a file (and `fim mcp serve`'s
protocol: tests/mcp/test_newcomer50_serve_prints.py). A print of a Python tool (sync in
its worker thread, async on the loop, or from a thread it starts), of a `python:` hook or
of a `python:` eval check goes where a hook's stderr goes: a `fim.hooks` log line that
`fim run -v` shows on stderr, masked. Writes around Python (`os.write(1, ...)`,
`sys.__stdout__`, a child process inheriting fd 1) land on stderr, since fd 1 itself is
stderr while fim writes its answer to a private duplicate of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.inprocess_cli import run_fim
from tests.mcp_servers.harness import stdio_decl

SECRET = "tok-n50-4f9a8b7c6d5e"

TOOLS = '''\
import asyncio
import os
import subprocess
import sys
import threading

print("weather tools loaded")  # at import: before any server or run has started


def get_weather(city: str) -> str:
    """Retrieves the current weather report for a specified city."""
    print(f"--- Tool: get_weather called for city: {city} (key {os.environ['N50_KEY']}) ---")
    print("{")  # a line that ends a JSON reader outright
    helper = threading.Thread(target=_aside, args=(city,))
    helper.start()
    helper.join()
    return f"The weather in {city} is sunny."


def _aside(city):
    print(f"from a thread the tool started: {city}")


async def say_hello(name: str) -> str:
    """Greets the user."""
    print("--- Tool: say_hello called with name:", name, "---")
    await asyncio.sleep(0)
    return f"Hello, {name}!"


def raw(note: str) -> str:
    """Writes around Python's print."""
    os.write(1, f"os.write to fd 1: {note}\\n".encode())
    sys.__stdout__.write(f"sys.__stdout__: {note}\\n")
    sys.__stdout__.flush()
    sys.stdout.buffer.write(f"sys.stdout.buffer: {note}\\n".encode())
    code = "import sys; print('a child inheriting fd 1:', *sys.argv[1:])"
    subprocess.run([sys.executable, "-c", code, note], check=True)
    subprocess.run([sys.executable, "-c", code, note, "again"], stdout=sys.stdout, check=True)
    return "written"
'''

HOOKS = """\
from fim.hooks.base import PreToolUseHook


class Loud(PreToolUseHook):
    async def __call__(self, context):
        print("a python hook sees", context.tool_name)
        return self.allow()
"""

CHECKS = """\
def sunny(output, context):
    print("an eval check reads", output)
    return "sunny" in output
"""


def write_project(root: Path) -> Path:
    """Agent `weather` (ADK's tutorial tools, a printing hook), agent `raw` (writes to fd 1
    and children), and an eval suite of `weather` with a printing `python:` check."""
    files = {
        "fim.yaml": 'name: n50\ndescription: "key ${N50_KEY}"\nstate: sqlite:///.fim/state.db\n',
        "hooks/weather.py": TOOLS,
        "hooks/loud.py": HOOKS,
        "hooks/checks.py": CHECKS,
        "agents/weather.yaml": (
            "description: Weather\nmodel: scripted:weather.script.yaml\n"
            "tools: [weather:get_weather, weather:say_hello]\nhooks:\n  - python: loud:Loud\n"
        ),
        "weather.script.yaml": (
            "- tool_calls: [{name: say_hello, arguments: {name: Bob}}, "
            "{name: get_weather, arguments: {city: London}}]\n"
            '- text: "It is sunny in London."\n'
        ),
        "agents/raw.yaml": (
            "description: Raw\nmodel: scripted:raw.script.yaml\ntools: [weather:raw]\n"
        ),
        "raw.script.yaml": (
            "- tool_calls: [{name: raw, arguments: {note: n50}}]\n- text: Done writing.\n"
        ),
        "evals/weather.yaml": (
            "agent: weather\ncases:\n  - name: london\n    input: Weather in London?\n"
            "    expect:\n      - python: checks:sunny\n"
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def environment() -> dict[str, str]:
    return {**os.environ, "N50_KEY": SECRET}


PRINTED = (
    "weather tools loaded",
    "--- Tool",
    "from a thread",
    "a python hook sees",
    "an eval check reads",
    SECRET,
)


def test_fim_run_json_is_only_events_while_tools_and_hooks_print(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    done = run_fim(
        "run", "weather", "Weather in London?", "--json", "-p", str(root), env=environment()
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # every line an event
    assert events[-1]["type"] == "run_finished"
    assert not [p for p in PRINTED if p in done.stdout]


def test_a_plain_answer_is_the_answer_alone(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    done = run_fim("run", "weather", "Weather in London?", "-p", str(root), env=environment())
    assert done.returncode == 0, done.stderr
    assert done.stdout == "It is sunny in London.\n"


def test_verbose_shows_each_printed_line_on_stderr_masked(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    done = run_fim("run", "weather", "Weather in London?", "-v", "-p", str(root), env=environment())
    assert done.stdout == "It is sunny in London.\n"
    printed = [line for line in done.stderr.splitlines() if " printed: " in line]
    assert sorted(printed) == sorted(
        [
            "fim: hooks module 'loud' printed: a python hook sees say_hello",
            "fim: hooks module 'loud' printed: a python hook sees get_weather",
            "fim: tool 'say_hello' printed: --- Tool: say_hello called with name: Bob ---",
            "fim: tool 'get_weather' printed: --- Tool: get_weather called for city: London "
            "(key ***) ---",
            "fim: tool 'get_weather' printed: {",
            # a thread the tool started does not carry its call: its module is named
            "fim: hooks module 'weather' printed: from a thread the tool started: London",
        ]
    )
    assert SECRET not in done.stderr


def test_without_verbose_the_prints_are_not_shown_at_all(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    done = run_fim("run", "weather", "Weather in London?", "-p", str(root), env=environment())
    assert not [p for p in PRINTED if p in done.stdout + done.stderr]


def test_fim_eval_json_report_parses_while_tools_hooks_and_checks_print(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    done = run_fim(
        "eval", "--json", "-", "--with-hooks", "-p", str(root), env=environment(), timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # the report, whole
    assert report["suites"][0]["cases"][0]["passed"] is True
    assert not [p for p in PRINTED if p in done.stdout]


def fim_process(root: Path, *args: str, stdout: int | object = subprocess.PIPE) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "fim.cli", "-p", str(root), *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env={**environment(), "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        timeout=120,
    )


def test_writes_to_fd_1_and_children_inheriting_it_land_on_stderr(tmp_path: Path) -> None:
    """A process of its own (an in-process test has no fd 1 of the command's): `--json`
    stays events, a plain answer sent to a file stays the answer."""
    root = write_project(tmp_path / "p")
    done = fim_process(root, "run", "raw", "go", "--json")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["type"] for line in done.stdout.splitlines()][-1] == "run_finished"
    for written in (
        "os.write to fd 1: n50",
        "sys.__stdout__: n50",
        "a child inheriting fd 1: n50",
        "a child inheriting fd 1: n50 again",
    ):
        assert written not in done.stdout and written in done.stderr
    assert "sys.stdout.buffer: n50" not in done.stdout + done.stderr  # a print: logged

    answer = tmp_path / "answer.txt"
    with answer.open("w") as file:
        done = fim_process(root, "run", "raw", "go", stdout=file)
    assert done.returncode == 0, done.stderr
    assert answer.read_text() == "Done writing.\n"
    assert "os.write to fd 1: n50" in done.stderr


def test_a_stdio_mcp_server_fim_starts_still_answers_on_its_own_pipe(tmp_path: Path) -> None:
    """Its stdout is a pipe fim reads, never fd 1: the move of fd 1 leaves it alone."""
    root = write_project(tmp_path / "p")
    with (root / "fim.yaml").open("a") as fim_yaml:
        fim_yaml.write(f"mcp_servers: {{demo: {json.dumps(stdio_decl())}}}\n")
    (root / "agents" / "piped.yaml").write_text(
        "description: Piped\nmodel: scripted:piped.script.yaml\nmcp: [demo]\n"
    )
    (root / "piped.script.yaml").write_text(
        "- tool_calls: [{name: mcp, arguments: {subcommand: call, server: demo, tool: echo, "
        "parameters: {text: through its own pipe}}}]\n- text: Echoed.\n"
    )
    done = fim_process(root, "run", "piped", "go", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    [result] = [e for e in events if e["type"] == "tool_result"]
    assert result["content"] == "through its own pipe" and not result["is_error"]
