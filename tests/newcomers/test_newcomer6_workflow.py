"""Workflows as a LangGraph user meets them (newcomer review 6): a `tool` node calls a project
function (`tool: mytools:slow`, as an agent's `tools:` does); Ctrl-C on `fim workflow run`
says where the run stopped and how to go on, and `fim workflow resume` continues it like an
orphaned run (the node cut off runs again, finished ones are kept); the resume refusals say
which runs can be resumed; and a typo'd `--input` name on a human node is named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.errors import ConfigError, RunError
from fim.run.services import Services
from fim.store import get_store
from fim.workflows.engine import WorkflowEngine, load_run
from tests.inprocess_cli import run_fim

TOOLS = '''
import asyncio
from pathlib import Path


def slow(seconds: int) -> dict:
    """Pretend to work for a while."""
    with open("slow-calls", "a") as f:
        f.write("x")
    return {"slept": seconds}


async def wait_for(flag: str) -> str:
    """Wait until the file `flag` exists."""
    while not Path(flag).exists():
        await asyncio.sleep(0.02)
    return "flag seen"
'''

FLOW = """\
description: a project function between two steps
nodes:
  first: {type: tool, tool: "mytools:slow", args: {seconds: 1}}
  second: {type: tool, tool: "mytools:wait_for", args: {flag: "go"}, needs: [first]}
  third: {type: tool, tool: calculator, args: {expression: "6*7"}, needs: [second]}
outputs:
  slept: "{{ nodes.first.output.slept }}"
  waited: "{{ nodes.second.output }}"
"""

ASK = """\
description: a human note
nodes:
  approve:
    type: human
    prompt: "ok?"
    input_schema: {type: object, properties: {note: {type: string}}, required: [note]}
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "workflows").mkdir()
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "mytools.py").write_text(TOOLS)
    (tmp_path / "fim.yaml").write_text('name: nc6\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "workflows" / "long.yaml").write_text(FLOW)
    (tmp_path / "workflows" / "ask.yaml").write_text(ASK)
    return tmp_path


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


def problems(root: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        compile_project(root)
    return [str(p) for p in caught.value.problems]


# ------------------------------------------------------------ tool: module:function


def test_a_tool_node_calls_a_project_function(root: Path) -> None:
    (root / "go").touch()

    ran = fim(root, "workflow", "run", "long", "--json")

    assert ran.returncode == 0, ran.stderr + ran.stdout
    doc = json.loads(ran.stdout)
    assert doc["status"] == "ok"
    assert doc["outputs"] == {"slept": 1, "waited": "flag seen"}
    assert (root / "slow-calls").read_text() == "x"


def test_validate_checks_the_module_and_function_as_for_an_agent(root: Path) -> None:
    (root / "workflows" / "bad.yaml").write_text(
        "description: bad\n"
        "nodes:\n"
        '  a: {type: tool, tool: "mytools:nope"}\n'
        '  b: {type: tool, tool: "nothere:slow"}\n'
        '  c: {type: tool, tool: "calculater"}\n'
        '  d: {type: tool, tool: "slowtool"}\n'
    )

    found = problems(root)

    assert found[:3] == [
        "workflows/bad.yaml:3:25: cannot import 'mytools:nope' (hooks/mytools.py has no "
        "function 'nope'; functions in it: slow, wait_for)",
        "workflows/bad.yaml:4:25: cannot import 'nothere:slow' (there is no hooks/nothere.py; "
        "valid modules in hooks/: mytools)",
        "workflows/bad.yaml:5:25: unknown builtin tool 'calculater' (did you mean 'calculator'?)",
    ]
    assert found[3].startswith("workflows/bad.yaml:6:25: unknown builtin tool 'slowtool' (")
    assert found[3].endswith("; or module:function for a function in hooks/<module>.py)")
    assert len(found) == 4


def test_the_node_calls_the_tool_by_its_function_name_as_hooks_and_evals_see_it(
    root: Path,
) -> None:
    """`mytools:slow` is the tool `slow` in a run (as in an agent's `tools:`), so a
    `tool_called: slow` assertion on the workflow is one that can be met."""
    (root / "evals").mkdir()
    case = "cases:\n  - name: c\n    input: {}\n    expect: [{tool_called: %s}]\n"
    (root / "evals" / "long.yaml").write_text("workflow: long\n" + case % "slow")
    compile_project(root)

    (root / "evals" / "long.yaml").write_text("workflow: long\n" + case % "mytools:slow")
    [problem] = problems(root)
    assert "workflow 'long' has no tool 'mytools:slow'" in problem


def test_a_project_function_in_a_read_only_project_is_a_write_and_is_blocked(
    root: Path,
) -> None:
    """The same guard as a builtin tool node: fim cannot tell what a function does, so
    one not marked `@fim.tools.read_only` counts as a write."""
    (root / "fim.yaml").write_text('name: nc6\nstate: "sqlite:///.fim/state.db"\nread_only: true\n')

    ran = fim(root, "workflow", "run", "long")

    assert ran.returncode == 1
    assert "the call to 'slow' was blocked by a hook" in " ".join(ran.stdout.split())
    assert not (root / "slow-calls").exists()


# ------------------------------------------------------------ Ctrl-C and resume


def _interrupt(root: Path) -> tuple[str, int, str]:
    """`fim workflow run long` in a process of its own, sent SIGINT (Ctrl-C) once it shows
    the node `second` started: what it printed after that, its exit code, the run id."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fim.cli", "workflow", "run", "long", "--project", str(root)],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if "▶ second" in line:
                proc.send_signal(signal.SIGINT)
                break
        after, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    runs = json.loads(fim(root, "workflow", "runs", "--json").stdout)
    return after, proc.returncode, runs[0]["run_id"]


def test_ctrl_c_says_where_the_run_stopped_and_resume_finishes_it(root: Path) -> None:
    after, code, run_id = _interrupt(root)

    assert code == 130
    assert after.strip() == (
        f"cancelled at 'second'; run {run_id} (done: first); "
        f"fim workflow resume {run_id} re-runs from 'second'"
    )
    shown = json.loads(fim(root, "workflow", "show", run_id, "--json").stdout)
    assert shown["status"] == "cancelled"
    assert {n: s["status"] for n, s in shown["nodes"].items()} == {
        "first": "ok",
        "second": "cancelled",
        "third": "pending",
    }

    (root / "go").touch()
    resumed = fim(root, "workflow", "resume", run_id, "--json")

    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    doc = json.loads(resumed.stdout)
    assert (doc["run_id"], doc["status"]) == (run_id, "ok")
    assert doc["outputs"] == {"slept": 1, "waited": "flag seen"}
    assert (root / "slow-calls").read_text() == "x", "the finished node does not run again"


async def _stopped_run(root: Path) -> tuple[Services, str]:
    """A run of `long` whose caller stopped listening while `second` waited (what Ctrl-C
    and a client leaving its stream do): recorded `cancelled`."""
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    engine = WorkflowEngine(snapshot, "long", services)
    events = engine.run({})
    async for event in events:
        if event.type == "node_started" and event.node == "second":
            break
    await events.aclose()
    assert engine.state is not None and engine.state.status == "cancelled"
    return services, engine.run_id


async def test_only_the_operators_resume_continues_a_cancelled_run(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine continues a cancelled run only when asked to (`cancelled=True`, what
    `fim workflow resume` passes): an approval decided over HTTP or a `fim worker` job
    never brings back a run an API caller cancelled."""
    monkeypatch.chdir(root)  # the functions' files are relative to it
    services, run_id = await _stopped_run(root)
    try:
        engine = WorkflowEngine(compile_project(root), "long", services)
        with pytest.raises(RunError) as refused:
            async for _ in engine.resume(run_id, True):
                pass
        assert refused.value.message == f"run '{run_id}' is cancelled, not paused at a human node"
        assert refused.value.hint == (
            "a run paused at a human node, one whose process died (`orphaned` in "
            "`fim workflow runs`) or one stopped mid-run (Ctrl-C) can be resumed; start this "
            "one again with `fim workflow run long`"
        )
        assert (await load_run(services, run_id)).status == "cancelled"
    finally:
        await services.aclose()


async def test_a_run_cancelled_from_outside_its_engine_says_why_it_cannot_resume(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revoked key, an expired approval: `record_cancelled` keeps the reason, and such a
    run is not continued (its reason stands)."""
    monkeypatch.chdir(root)  # the functions' files are relative to it
    services, run_id = await _stopped_run(root)
    try:
        store = get_store(services)
        record = await store.get_run(run_id)
        assert record is not None
        await store.record_cancelled(record, "the approval expired")
    finally:
        await services.aclose()

    refused = fim(root, "workflow", "resume", run_id)

    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"error: run '{run_id}' was cancelled: the approval expired (only a run stopped "
        "while it ran (Ctrl-C, its client leaving) can be resumed; start this one again "
        "with `fim workflow run long`)"
    )


def test_resuming_a_finished_run_says_which_runs_can_be_resumed(root: Path) -> None:
    (root / "go").touch()
    run_id = json.loads(fim(root, "workflow", "run", "long", "--json").stdout)["run_id"]

    refused = fim(root, "workflow", "resume", run_id)

    assert refused.returncode == 1
    text = " ".join(refused.stderr.split())
    assert f"run '{run_id}' is ok, not paused at a human node" in text
    assert "one whose process died (`orphaned` in `fim workflow runs`)" in text
    assert "only paused runs" not in text


# ------------------------------------------------------------ resume --input


def test_an_unknown_input_name_is_named_with_a_did_you_mean(root: Path) -> None:
    started = fim(root, "workflow", "run", "ask", "--json")
    run_id = json.loads(started.stdout)["run_id"]

    typo = fim(root, "workflow", "resume", run_id, "--approve", "--input", "nots=hi")

    assert typo.returncode == 1
    assert typo.stderr.startswith(
        "error: invalid input for node 'approve': unknown input 'nots' (did you mean "
        "'note'?); 'note' is a required property"
    )
    fixed = fim(root, "workflow", "resume", run_id, "--approve", "--input", "note=hi", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["status"] == "ok"
