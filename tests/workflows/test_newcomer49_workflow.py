"""Newcomer 49 #8: a workflow `tool` node fed another node's text where its tool wants a
number, an integer or a boolean.

A tool's result that is not a JSON object or array stays text (README "Templates"), so
`total: "{{ nodes.tip.output }}"` passes the calculator's `"12"`, as the README says, and
nothing is coerced. The node's error now says which template gave the text and how to
convert it, and no longer tells the workflow's author to "call the tool again" (advice
for a model, which a node has not).
"""

from __future__ import annotations

import re
from pathlib import Path

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.run.services import Services
from fim.workflows.engine import WorkflowEngine

TOOLS = '''\
def split_bill(total: float, people: int = 2, round_up: bool = False) -> str:
    """Split a bill between people.

    Args:
        total: the bill with its tip
        people: how many pay
        round_up: round each share up to a whole unit
    """
    share = total / people
    return str(-(-share // 1) if round_up else round(share, 2))


def flag() -> str:
    """A yes/no answer as text."""
    return "True"
'''

TIP = """\
inputs:
  bill: {type: number}
nodes:
  tip: {type: tool, tool: calculator, args: {expression: "{{ inputs.bill }} * 0.15"}}
  flag: {type: tool, tool: "mytools:flag"}
  split:
    type: tool
    tool: "mytools:split_bill"
    needs: [tip, flag]
    args: {total: TOTAL, people: PEOPLE, round_up: ROUND_UP}
outputs: {each: "{{ nodes.split.output }}"}
"""


def write_project(root: Path, total: str, people: str = "3", round_up: str = "false") -> Path:
    workflow = TIP.replace("TOTAL", total).replace("PEOPLE", people)
    files = {
        "fim.yaml": 'name: tips\nstate: "sqlite:///.fim/state.db"\n',
        "hooks/mytools.py": TOOLS,
        "workflows/tip.yaml": workflow.replace("ROUND_UP", round_up),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


async def run_tip(root: Path) -> tuple[str, str | None, dict[str, object]]:
    """The run's status, the `split` node's error (if it failed) and the run's outputs."""
    snapshot = compile_project(root)
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    engine = WorkflowEngine(snapshot, "tip", services)
    failed = None
    async for event in engine.run({"bill": 80}):
        if event.type == "node_failed":
            failed = event.error
    assert engine.state is not None
    return engine.state.status, failed, engine.state.outputs


async def test_text_for_a_number_names_its_template_and_the_fix(tmp_path: Path) -> None:
    status, error, _ = await run_tip(write_project(tmp_path, '"{{ nodes.tip.output }}"'))

    assert status == "failed"
    assert error == (
        "Error: invalid arguments for 'split_bill': total: '12' is not of type 'number'. "
        "Valid parameters: {total: number, people?: integer, round_up?: boolean} "
        '(nodes.tip.output is the text "12": write "{{ nodes.tip.output | float }}")'
    )


async def test_the_fix_the_error_names_runs(tmp_path: Path) -> None:
    """The hint is the fix: written into the workflow as it says, the run succeeds."""
    broken = write_project(tmp_path / "broken", '"{{ nodes.tip.output }}"')
    _, error, _ = await run_tip(broken)
    assert error is not None
    fix = re.search(r'write "(\{\{.*?\}\})"', error)
    assert fix is not None, error

    status, _, outputs = await run_tip(write_project(tmp_path / "fixed", f'"{fix[1]}"'))

    assert (status, outputs) == ("ok", {"each": "4.0"})


async def test_each_wrong_argument_gets_its_own_hint(tmp_path: Path) -> None:
    root = write_project(
        tmp_path / "broken",
        total='"{{ nodes.tip.output }}0"',  # text around the expression: a string
        people='"3"',  # quoted in the YAML
        round_up='"{{ nodes.flag.output }}"',
    )

    _, error, _ = await run_tip(root)

    assert error is not None
    hints = error[error.index("} (") + 3 : -1].split("; ")
    assert hints == [
        'args.total renders as the text "120": a number needs the whole value to be one '
        'expression, e.g. "{{ nodes.ID.output | float }}"',
        'args.people is the text "3": write it without quotes for an integer',
        'nodes.flag.output is the text "True": write "{{ nodes.flag.output | lower == \'true\' }}"',
    ]
    assert "call the tool again" not in error
    boolean = re.search(r'write "(\{\{.*?\}\})"$', hints[2])
    assert boolean is not None
    fixed = write_project(
        tmp_path / "fixed", '"{{ nodes.tip.output | float }}"', round_up=f'"{boolean[1]}"'
    )
    assert await run_tip(fixed) == ("ok", None, {"each": "4.0"})


async def test_no_conversion_is_invented(tmp_path: Path) -> None:
    """Text that is no number gets only the advice that fits a workflow; a tool's own
    failure passes unchanged."""
    _, error, _ = await run_tip(write_project(tmp_path / "words", '"twelve"'))
    assert error == (
        "Error: invalid arguments for 'split_bill': total: 'twelve' is not of type 'number'. "
        "Valid parameters: {total: number, people?: integer, round_up?: boolean} "
        "(fix the node's args)"
    )

    nobody = write_project(tmp_path / "nobody", '"{{ nodes.tip.output | float }}"', people="0")
    _, error, _ = await run_tip(nobody)
    assert error == "Error: tool 'split_bill' failed: ZeroDivisionError: float division by zero"


def test_the_readme_says_a_tools_text_stays_text() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    templates = readme[readme.index("**Templates.**") : readme.index("**Running one.**")]

    assert "a tool's text result stays text" in templates
    assert '`"{{ nodes.tip.output | float }}"`' in templates
