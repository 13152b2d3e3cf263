"""A project's own Python function as a tool (`tools: [mytools:add]`), as ADK's
FunctionTool and LangGraph's @tool give one: the name is the function's, the description
its docstring's first paragraph, the JSON Schema pydantic's reading of its type hints;
bad arguments, exceptions and odd results are observations for the model; hooks see and
block the call like any builtin's in every tool mode; a read-only agent may call only
functions marked `@fim.tools.read_only`; and `fim validate` says what is wrong with an
entry at its line in the agent file."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.errors import ConfigError, RunError
from fim.events import ErrorEvent, HookEvent, ToolResultEvent
from fim.run.assembly import assemble
from fim.run.services import RunContext, Services
from fim.testing.runs import run_events

TOOLS = '''
import asyncio
import datetime
import threading
from typing import Annotated, Literal

from pydantic import Field

from fim.tools import read_only

CALLS = []


@read_only
def add(a: int, b: Annotated[int, Field(description="the second term")] = 1) -> int:
    """Add two integers.

    The model never reads this second paragraph."""
    CALLS.append((a, b))
    return a + b


def days_until(day: datetime.date) -> str:
    """Days from 2024-01-01 to a date."""
    CALLS.append(day)
    return f"{(day - datetime.date(2024, 1, 1)).days} days"


def where() -> str:
    """The thread a sync tool runs in."""
    return threading.current_thread().name


async def where_async() -> str:
    """The thread an async tool runs in."""
    await asyncio.sleep(0)
    return threading.current_thread().name


def lookup(key: Literal["x", "y"]) -> dict:
    """A record, as JSON."""
    return {"key": key, "values": [1, 2], "note": "é"}


def boom(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)
'''


def project(root: Path, agent: dict[str, Any], script: list[dict[str, Any]], **fim: Any) -> Path:
    """A project whose agent `calc` (scripted model) has the functions of hooks/mytools.py."""
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "hooks" / "mytools.py").write_text(TOOLS)
    (root / "fim.yaml").write_text(
        json.dumps({"name": "pt", "state": "sqlite:///.fim/state.db", **fim})
    )
    (root / "calc.script.yaml").write_text(json.dumps(script))
    decl = {"description": "calc", "model": "scripted:calc.script.yaml", "instructions": "Go."}
    (root / "agents" / "calc.yaml").write_text(json.dumps({**decl, **agent}))
    return root


def turn(*calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A script: one model turn with these tool calls, then a final answer."""
    if not calls:
        return [{"text": "done"}]
    tool_calls = [{"id": f"c{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(calls)]
    return [{"tool_calls": tool_calls}, {"text": "done"}]


def results(events: list[Any]) -> dict[str, ToolResultEvent]:
    return {e.call_id: e for e in events if isinstance(e, ToolResultEvent)}


def run(root: Path) -> list[Any]:
    return asyncio.run(run_events(compile_project(root), "calc", "go"))


def test_the_function_name_docstring_and_type_hints_make_the_tool(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"tools": ["mytools:add", "calculator"]}, turn())
    snapshot = compile_project(root)
    ctx = RunContext(
        snapshot=snapshot,
        agent=snapshot.agent("calc"),
        services=Services(providers=CAPABILITIES, root=root),
    )
    registry = asyncio.run(assemble(ctx)).registry
    [spec] = [s for s in registry.specs() if s.name == "add"]
    assert spec.description == "Add two integers."
    assert spec.parameters["properties"]["a"]["type"] == "integer"
    assert spec.parameters["properties"]["b"]["description"] == "the second term"
    assert spec.parameters["required"] == ["a"]
    assert spec.parameters["additionalProperties"] is False
    assert "calculator" in registry.names


def test_calls_validate_run_off_the_loop_and_answer_in_text(tmp_path: Path) -> None:
    script = turn(
        ("add", {"a": 2, "b": 40}),
        ("add", {"a": "two"}),
        ("days_until", {"day": "not-a-date"}),  # passes the JSON Schema, not pydantic
        ("days_until", {"day": "2024-01-31"}),
        ("where", {}),
        ("where_async", {}),
        ("lookup", {"key": "x"}),
        ("boom", {"reason": "no luck"}),
    )
    tools = ["add", "days_until", "where", "where_async", "lookup", "boom"]
    root = project(tmp_path / "p", {"tools": [f"mytools:{t}" for t in tools]}, script)
    events = run(root)
    got = results(events)
    assert got["c0"].content == "42" and not got["c0"].is_error
    assert got["c1"].is_error and "invalid arguments for 'add'" in got["c1"].content
    assert got["c2"].is_error and "invalid arguments for 'days_until': day:" in got["c2"].content
    assert "Traceback" not in got["c2"].content
    assert got["c3"].content == "30 days"
    assert got["c4"].content != got["c5"].content  # sync in a worker thread, async on the loop
    assert json.loads(got["c6"].content) == {"key": "x", "values": [1, 2], "note": "é"}
    assert got["c7"].is_error
    assert got["c7"].content == "Error: tool 'boom' failed: ValueError: no luck"
    assert not [e for e in events if isinstance(e, ErrorEvent)]


GUARD = """
from fim.hooks import PreToolUseHook


class NoBigSums(PreToolUseHook):
    async def __call__(self, context):
        if context.tool_name == "add" and context.tool_args.get("a", 0) > 100:
            return self.block(f"{context.tool_name} of {context.tool_args['a']} is too big")
        return self.allow()
"""

LOGGER = f"""#!{sys.executable}
import json, pathlib, sys
event = json.load(sys.stdin)
pathlib.Path("seen.jsonl").open("a").write(json.dumps(event["tool_name"]) + "\\n")
"""


@pytest.mark.parametrize("mode", ["legacy", "progressive"])
def test_hooks_see_and_block_a_function_like_a_builtin(tmp_path: Path, mode: str) -> None:
    modes = {"connectors": mode, "databases": mode, "mcp": mode}
    modes["skills"] = "inline" if mode == "legacy" else "progressive"
    hooks = [
        {"python": "guard:NoBigSums", "matcher": "add"},
        {"event": "PreToolUse", "matcher": "add|calculator", "command": "./hooks/log.py"},
    ]
    script = turn(
        ("add", {"a": 1000, "b": 1}),
        ("add", {"a": 1, "b": 1}),
        ("calculator", {"expression": "1+1"}),
    )
    agent = {"tools": ["mytools:add", "calculator"], "hooks": hooks, "tool_modes": modes}
    root = project(tmp_path / "p", agent, script)
    (root / "hooks" / "guard.py").write_text(GUARD)
    (root / "hooks" / "log.py").write_text(LOGGER)
    (root / "hooks" / "log.py").chmod(0o755)
    events = run(root)
    got = results(events)
    assert got["c0"].is_error and "add of 1000 is too big" in got["c0"].content
    assert got["c1"].content == "2" and got["c2"].content == "2"
    blocks = [e for e in events if isinstance(e, HookEvent) and e.decision == "block"]
    assert [(b.tool_name, b.hook) for b in blocks] == [("add", "guard:NoBigSums")]
    seen = (root / "seen.jsonl").read_text().split()
    assert sorted(json.loads(s) for s in seen) == ["add", "calculator"]  # c0 was blocked first


def test_a_read_only_agent_calls_only_functions_marked_read_only(tmp_path: Path) -> None:
    script = turn(("add", {"a": 1}), ("lookup", {"key": "y"}))
    agent = {"tools": ["mytools:add", "mytools:lookup"], "read_only": True}
    events = run(project(tmp_path / "p", agent, script))
    got = results(events)
    assert got["c0"].content == "2"  # @read_only
    assert got["c1"].is_error and "'lookup' is a write action" in got["c1"].content
    assert "read-only" in got["c1"].content


def problems(root: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        compile_project(root)
    return [str(p) for p in info.value.problems]


def test_validate_names_entries_that_cannot_be_tools_at_their_line(tmp_path: Path) -> None:
    tools = ["mytool:add", "mytools:calculator", "calculater", "mytools:add", "other:add"]
    root = project(tmp_path / "p", {}, turn())
    (root / "hooks" / "other.py").write_text("def add(x: int) -> int:\n    'Add.'\n    return x\n")
    (root / "agents" / "calc.yaml").write_text(
        "description: calc\nmodel: scripted:calc.script.yaml\ninstructions: Go.\ntools:\n"
        + "".join(f"  - {t}\n" for t in tools)
    )
    assert problems(root) == [
        "agents/calc.yaml:5:5: tools: cannot import 'mytool:add' "
        "(there is no hooks/mytool.py; did you mean 'mytools'?)",
        "agents/calc.yaml:6:5: tools: 'mytools:calculator' would be named 'calculator', like "
        "the builtin tool 'calculator' (rename the function: a tool's name is its function's "
        "name)",
        "agents/calc.yaml:7:5: unknown builtin tool 'calculater' (did you mean 'calculator'?)",
        "agents/calc.yaml:9:5: tools: 'other:add' and 'mytools:add' are both named 'add' "
        "(rename one of the functions: a tool's name is its function's name)",
    ]


def test_validate_reports_every_tool_problem_in_one_run(tmp_path: Path) -> None:
    """A missing module once hid the problems importing the other functions would find,
    and a function without a docstring hid its unannotated parameters: fixing one showed
    the next. A newcomer gets them all at once."""
    root = project(tmp_path / "p", {}, turn())
    (root / "hooks" / "more.py").write_text("def bare(x):\n    return x\n")
    (root / "hooks" / "broken.py").write_text("import not_a_module_anywhere\n")
    refs = ["nomodule:f", "more:bare", "broken:f", "more:missing"]
    (root / "agents" / "calc.yaml").write_text(
        "description: calc\nmodel: scripted:calc.script.yaml\ninstructions: Go.\ntools:\n"
        + "".join(f"  - {t}\n" for t in refs)
    )
    found = problems(root)
    assert [line.split(" (")[0] for line in found] == [
        "agents/calc.yaml:5:5: tools: cannot import 'nomodule:f'",
        "agents/calc.yaml:6:5: tools: 'more:bare' has no docstring, and has parameters "
        "without a type annotation: x",
        "agents/calc.yaml:8:5: tools: cannot import 'more:missing'",
        # a module that fails to import: once, at its line (newcomer-53 #16)
        "hooks/broken.py:1:1: module broken.py failed to import: ModuleNotFoundError: No "
        "module named 'not_a_module_anywhere'; the tool broken:f of agent calc cannot load",
    ]


def test_validate_imports_each_function_and_checks_its_signature(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {}, turn())
    (root / "hooks" / "more.py").write_text(
        textwrap.dedent(
            '''
            def untyped(a, b: int, c):
                """Has untyped parameters."""

            def quiet(a: int) -> int:
                return a

            def star(*values: int) -> int:
                """Takes *args."""
                return 0
            '''
        )
    )
    (root / "hooks" / "broken.py").write_text("import not_a_module_anywhere\n")
    refs = ["more:untyped", "more:quiet", "more:star", "more:missing", "broken:f"]
    (root / "agents" / "calc.yaml").write_text(
        "description: calc\nmodel: scripted:calc.script.yaml\ninstructions: Go.\ntools:\n"
        + "".join(f"  - {t}\n" for t in refs)
    )
    found = problems(root)
    assert found[0] == (
        "agents/calc.yaml:5:5: tools: 'more:untyped' has parameters without a type "
        "annotation: a, c (annotate each one, e.g. a: int; the tool's JSON Schema comes "
        "from them)"
    )
    assert found[1].startswith("agents/calc.yaml:6:5: tools: 'more:quiet' has no docstring")
    assert found[2].startswith(
        "agents/calc.yaml:7:5: tools: 'more:star' has parameters a tool cannot be given: *values"
    )
    assert found[3] == (
        "agents/calc.yaml:8:5: tools: cannot import 'more:missing' (hooks/more.py has no "
        "function 'missing'; functions in it: quiet, star, untyped)"
    )
    assert found[4].startswith("hooks/broken.py:1:1: module broken.py failed to import: ")
    assert "ModuleNotFoundError: No module named 'not_a_module_anywhere'" in found[4]
    assert len(found) == 5


def test_a_hook_matcher_on_the_function_name_is_a_valid_target(tmp_path: Path) -> None:
    agent = {"tools": ["mytools:add"], "hooks": [{"use": "truncate", "matcher": "add"}]}
    compile_project(project(tmp_path / "p", agent, turn()))  # no "matches no tool"


def test_a_module_broken_after_validate_leaves_the_run_on_the_compiled_tool(
    tmp_path: Path,
) -> None:
    """The tool's code is pinned in the snapshot (`Snapshot.modules`): an edit after the
    compile reaches runs only through a reload, so the snapshot's run calls `add` as it
    was validated. A snapshot without the module fails the run with a clear error."""
    root = project(tmp_path / "p", {"tools": ["mytools:add"]}, turn(("add", {"a": 1})))
    snapshot = compile_project(root)
    (root / "hooks" / "mytools.py").write_text("def add(:\n")
    events = asyncio.run(run_events(snapshot, "calc", "go"))
    assert [e.content for e in events if isinstance(e, ToolResultEvent)] == ["2"]
    with pytest.raises(RunError) as info:  # what every surface shows as one line
        asyncio.run(run_events(dataclasses.replace(snapshot, modules={}), "calc", "go"))
    assert info.value.message == "agents/calc.yaml: tools: cannot import 'mytools:add'"
    assert "hooks/mytools.py was written after it was compiled" in str(info.value.hint)


def test_project_code_that_raises_while_a_tool_is_looked_up_is_a_located_problem(
    tmp_path: Path,
) -> None:
    """A module `__getattr__` and a callable whose signature raises run project code while
    the tool is looked up and built: each is a problem at its entry, never a crash."""
    root = project(tmp_path / "p", {}, turn())
    (root / "hooks" / "odd.py").write_text(
        textwrap.dedent(
            '''
            def __getattr__(name):
                raise RuntimeError("no " + name)

            class Callable:
                __signature__ = property(lambda self: 1 / 0)

                def __call__(self, x: int) -> int:
                    """Doc."""
                    return x

            made = Callable()
            '''
        )
    )
    (root / "agents" / "calc.yaml").write_text(
        "description: calc\nmodel: scripted:calc.script.yaml\ninstructions: Go.\n"
        "tools: [odd:missing, odd:made]\n"
    )
    assert problems(root) == [
        "agents/calc.yaml:4:9: tools: cannot import 'odd:missing' (looking up 'missing' in "
        "hooks/odd.py raised RuntimeError: no missing)",
        "agents/calc.yaml:4:22: tools: cannot build the tool 'odd:made': ZeroDivisionError: "
        "division by zero (a tool is a plain def or async def with annotated parameters and "
        "a docstring)",
    ]
