"""Where a project's code raised, at the terminal (newcomer-53 #1, #16).

- `fim run -v` and `fim runs show` print `at hooks/mytools.py:7 in _pick` under the
  error line of a Python tool that raised.
- A Python hook that raised is blocked (hooks fail closed) and its event keeps where
  (`at`, `traceback`); the model reads the same block reason as before, never a path.
- `-v`'s hook line of such a hook gives its reason on every call, short and with where
  (`hook failed: KeyError: 'max_id' at hooks/guards.py:9`): the first call's used to be
  bare after the warning while the second call's had the reason; the warning (printed
  even without `-v`) is followed by the `at` line.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.events import HookEvent, ToolResultEvent
from fim.testing.otlp import Receiver
from fim.testing.runs import run_events

TOOLS = '''from fim.tools import read_only


def _pick(orders: dict, key: int) -> dict:
    return orders[key]


@read_only
def lookup_order(id: int) -> dict:
    """Look up an order by its number."""
    return _pick({1: {"item": "teapot"}}, id)
'''

GUARDS = """from fim.hooks.base import PreToolUseHook
from fim.types import HookContext, HookResult


class OnlySmallOrders(PreToolUseHook):
    matcher = "lookup_order"

    async def __call__(self, context: HookContext) -> HookResult:
        if context.tool_args["id"] > self.options["max_id"]:
            return self.block("order ids above the limit are private")
        return self.allow()
"""

ONE_CALL = "- tool_calls: [{name: lookup_order, arguments: {id: 2}}]\n- text: Sorry.\n"
TWO_CALLS = (
    "- tool_calls: [{name: lookup_order, arguments: {id: 7}}, "
    "{name: lookup_order, arguments: {id: 1}}]\n- text: done\n"
)
HOOK_REASON = (
    "hook 'guards:OnlySmallOrders' failed (KeyError: 'max_id'), so the call was blocked "
    "(hooks fail closed)"
)


def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text("name: p\nstate: sqlite:///.fim/state.db\n")
    (root / "hooks" / "mytools.py").write_text(TOOLS)
    (root / "hooks" / "guards.py").write_text(GUARDS)
    (root / "one.yaml").write_text(ONE_CALL)
    (root / "two.yaml").write_text(TWO_CALLS)
    (root / "agents" / "helper.yaml").write_text(
        "description: h\nmodel: scripted:one.yaml\ntools: [mytools:lookup_order]\n"
    )
    (root / "agents" / "guarded.yaml").write_text(
        "description: g\nmodel: scripted:two.yaml\ntools: [mytools:lookup_order]\n"
        "hooks:\n  - python: guards:OnlySmallOrders\n    with: {maxid: 5}\n"
    )
    return root


def fim(root: Path, *args: str) -> tuple[int, str]:
    """`fim ARGS -p ROOT`: its exit code and what it printed (stdout and stderr)."""
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = CliRunner().invoke(app, [*args, "-p", str(root)])
    return result.exit_code, result.stdout + result.stderr


def test_run_v_and_runs_show_print_where_a_tool_raised(tmp_path: Path) -> None:
    root = project(tmp_path)
    code, err = fim(root, "run", "helper", "order 2?", "-v")
    assert code == 0
    lines = err.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("← lookup_order"))
    assert lines[error].endswith("Error: tool 'lookup_order' failed: KeyError: 2")
    assert lines[error + 1] == "  at hooks/mytools.py:5 in _pick"
    code, shown = fim(root, "runs", "show", "last")
    assert code == 0
    assert "  at hooks/mytools.py:5 in _pick\n" in shown


async def test_a_raising_hooks_event_keeps_where_and_the_model_reads_the_same_reason(
    tmp_path: Path,
) -> None:
    events = await run_events(compile_project(project(tmp_path)), "guarded", "x")
    hooks = [e for e in events if isinstance(e, HookEvent)]
    assert [(h.decision, h.reason) for h in hooks] == [("block", HOOK_REASON)] * 2
    assert {h.at for h in hooks} == {"hooks/guards.py:9 in __call__"}
    assert all(h.traceback and h.traceback.endswith("KeyError: 'max_id'") for h in hooks)
    assert all('File "hooks/guards.py", line 9, in __call__' in (h.traceback or "") for h in hooks)
    for result in (e for e in events if isinstance(e, ToolResultEvent)):
        assert result.content.startswith(
            f"Blocked: the call to 'lookup_order' was not run. Reason: {HOOK_REASON}."
        )
        assert "hooks/guards.py" not in result.content


def test_run_v_gives_a_raising_hooks_line_its_reason_on_every_call(tmp_path: Path) -> None:
    code, err = fim(project(tmp_path), "run", "guarded", "x", "-v")
    assert code == 0
    lines = err.splitlines()
    line = "⚑ PreToolUse guards:OnlySmallOrders block: hook failed: KeyError: 'max_id' at "
    assert lines.count(line + "hooks/guards.py:9") == 2, err
    warning = next(i for i, text in enumerate(lines) if text.startswith("warning:"))
    assert lines[warning].endswith(HOOK_REASON)
    assert lines[warning + 1] == "  at hooks/guards.py:9 in __call__"


def test_without_v_the_warning_still_says_where(tmp_path: Path) -> None:
    code, err = fim(project(tmp_path), "run", "guarded", "x")
    assert code == 0
    assert f"{HOOK_REASON}\n  at hooks/guards.py:9 in __call__\n" in err
    assert "⚑" not in err


async def test_the_blocked_calls_span_records_the_hooks_exception(
    tmp_path: Path, receiver: Receiver
) -> None:
    await run_events(compile_project(project(tmp_path)), "guarded", "x")
    # deferred: the tracer is rebuilt around the test by the `receiver` fixture
    from fim.observe.tracing import flush

    assert flush()
    spans = [s for s in receiver.spans if s.name == "execute_tool lookup_order"]
    assert len(spans) == 2
    for span in spans:
        (exception,) = [attrs for name, attrs in span.events if name == "exception"]
        assert (exception["exception.type"], exception["exception.message"]) == (
            "KeyError",
            "'max_id'",
        )
