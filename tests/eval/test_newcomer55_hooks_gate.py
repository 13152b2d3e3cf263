"""newcomer55 #1: `fim eval` bypasses hooks by default (a CI gate's contract), but never
silently and never dangerously.

- A suite says `hooks: on|off`; `--with-hooks` / `--without-hooks` override it.
- Fail closed: a case that would execute real tool effects (`--record`, `--live`, or a
  scripted case with no cassette) with hooks bypassed only by default, on an agent whose
  PreToolUse hook would judge a tool that is not read-only, is refused before anything
  runs, at the hook's line, naming the agent, the hook and the tools.
- Nothing else changes: read-only tools, replayed cassettes, an explicit bypass and the
  example project's `fim eval` run as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.eval.runner import EvalRunner
from tests.eval_projects import eval_project

REPO = Path(__file__).resolve().parents[2]

ORDERS = '''\
import json
import os

from fim.tools import read_only


@read_only
def lookup_order(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id, "amount": 450.0}


def issue_refund(order_id: str, amount: float) -> dict:
    """Refund an order: money leaves (here, a line in a log stands in for the payments API)."""
    with open(os.environ["REFUNDS_LOG"], "a") as log:
        log.write(json.dumps({"order_id": order_id, "amount": amount}) + "\\n")
    return {"order_id": order_id, "refunded": amount}
'''
GUARDS = """\
from fim.hooks.base import PreToolUseHook


class RefundLimit(PreToolUseHook):
    matcher = "issue_refund"

    async def __call__(self, context):
        if float((context.tool_args or {}).get("amount", 0)) > 100:
            return self.block("refunds over $100 need a human: escalate")
        return self.allow()
"""
SCRIPT = """\
- tool_calls: [{name: lookup_order, arguments: {order_id: A1003}}]
- tool_calls: [{name: issue_refund, arguments: {order_id: A1003, amount: 450}}]
- text: "This refund is over our limit: I have escalated it."
"""
AGENT = """\
model: scripted:evals/support.script.yaml
instructions: Refunds above $100 must be escalated.
tools: [orders:lookup_order, orders:issue_refund]
hooks:
  - python: guards:RefundLimit
"""
SUITE = """\
agent: support
{hooks}cases:
  - name: large refund escalates
    input: Refund order A1003 please
    expect:
      - icontains: escalat
"""


@pytest.fixture
def refunds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "refunds.log"
    monkeypatch.setenv("REFUNDS_LOG", str(log))
    return log


def project(tmp_path: Path, hooks: str = "", agent: str = AGENT) -> Path:
    root = eval_project(tmp_path / "gate", demo=False)
    (root / "hooks").mkdir()
    (root / "hooks" / "orders.py").write_text(ORDERS)
    (root / "hooks" / "guards.py").write_text(GUARDS)
    (root / "agents" / "support.yaml").write_text(agent)
    (root / "evals" / "support.script.yaml").write_text(SCRIPT)
    (root / "evals" / "support.yaml").write_text(SUITE.format(hooks=hooks))
    return root


def fim_eval(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["eval", "--project", str(root), *args])
    return result.exit_code, result.output


def test_a_guarded_write_that_would_run_for_real_with_hooks_bypassed_by_default_is_refused(
    tmp_path: Path, refunds: Path
):
    """The persona's "must escalate" case passed while the guarded $450 refund really ran:
    a scripted case with no cassette runs its tools for real. Now nothing runs."""
    root = project(tmp_path)
    code, output = fim_eval(root)
    assert code == 2, output
    said = " ".join(output.split())
    assert said.startswith("agents/support.yaml:5:5: agent 'support' declares the PreToolUse")
    assert "hook guards:RefundLimit, which would judge issue_refund (not read-only)" in said
    assert "case 'large refund escalates' has no cassette" in said
    assert "`fim eval --with-hooks`, or `hooks: on` in evals/support.yaml" in said
    assert "`--without-hooks`, or `hooks: off`, bypasses its hooks on purpose" in said
    assert "lookup_order" not in said  # read-only: no guard is needed to run it
    assert not refunds.exists()


@pytest.mark.parametrize("mode", ["--record", "--live"])
def test_record_and_live_are_refused_too(tmp_path: Path, refunds: Path, mode: str):
    code, output = fim_eval(project(tmp_path), mode)
    assert code == 2, output
    assert f"`fim eval {mode}` would run its tool calls for real" in " ".join(output.split())
    assert not refunds.exists()


def test_with_hooks_the_guard_holds_and_nothing_is_refunded(tmp_path: Path, refunds: Path):
    code, output = fim_eval(project(tmp_path), "--with-hooks")
    assert code == 0, output
    assert "hooks ON" in output
    assert not refunds.exists()


def test_a_suite_says_hooks_on_and_the_cli_can_still_bypass_them(tmp_path: Path, refunds: Path):
    root = project(tmp_path, hooks="hooks: on\n")
    report = tmp_path / "report.json"
    code, output = fim_eval(root, "--json", str(report))
    assert code == 0, output
    assert json.loads(report.read_text())["suites"][0]["hooks"] == "on"
    assert not refunds.exists()
    code, output = fim_eval(root, "--without-hooks")  # on purpose: runs, as before
    assert code == 0, output
    assert "hooks bypassed" in output
    assert json.loads(refunds.read_text().splitlines()[0]) == {"order_id": "A1003", "amount": 450}


def test_hooks_off_in_the_suite_bypasses_on_purpose(tmp_path: Path, refunds: Path):
    code, output = fim_eval(project(tmp_path, hooks="hooks: off\n"))
    assert code == 0, output
    assert refunds.exists()


def test_an_agent_whose_guard_judges_only_read_only_tools_runs_as_before(
    tmp_path: Path, refunds: Path
):
    agent = AGENT.replace(
        "python: guards:RefundLimit", "python: guards:RefundLimit\n    matcher: lookup_order"
    )
    code, output = fim_eval(project(tmp_path, agent=agent))
    assert code == 0, output


async def test_the_runner_refuses_the_case_itself_for_every_caller(tmp_path: Path, refunds: Path):
    """`fim serve`'s Evals tab and other callers of the runner get the same refusal, as the
    case's ERROR (exit 2), not a run."""
    root = project(tmp_path)
    report = await EvalRunner(compile_project(root)).run()
    [run] = report.suites[0].runs
    assert run.config_error and run.error is not None
    assert "guards:RefundLimit" in run.error and "issue_refund" in run.error
    assert not refunds.exists()
    report = await EvalRunner(compile_project(root), with_hooks=False).run()  # on purpose
    assert report.suites[0].runs[0].passed and refunds.exists()


def test_a_replayed_cassette_needs_no_guard(tmp_path: Path, refunds: Path):
    """Replay runs nothing effectful (`fim.eval.tool_replay`), so it is never refused."""
    root = project(tmp_path)
    assert fim_eval(root, "--record", "--without-hooks")[0] == 0  # on purpose, once
    refunds.unlink()
    code, output = fim_eval(root)
    assert code == 0, output
    assert "1 replayed" in output or "replay" in output
    assert not refunds.exists()


def test_the_example_project_still_evaluates_as_ci_runs_it():
    """`.ci/run`'s `fim eval --junit` on the repository's example: its guarded agent's
    cases need a live model and are skipped, not refused."""
    code, output = fim_eval(REPO)
    assert code == 0, output
    assert "refused" not in output


def test_the_evals_tab_route_refuses_it_too_unless_asked_to_bypass(tmp_path: Path, refunds: Path):
    """`POST /v1/evals/{suite}/runs` (the dev page's Evals tab) sent `hooks: false` when it
    said nothing, an explicit bypass: the guarded refund ran. Unsaid, it is the suite's
    choice and the same refusal; `hooks: false` bypasses on purpose."""
    from starlette.testclient import TestClient

    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    app = create_app(SnapshotHolder(compile_project(project(tmp_path))))
    with TestClient(app, base_url="http://localhost") as client:
        refused = client.post("/v1/evals/support/runs", json={}).json()
        [case] = refused["suites"][0]["cases"]
        assert "guards:RefundLimit" in json.dumps(case) and not refunds.exists()
        client.post("/v1/evals/support/runs", json={"hooks": False})
    assert refunds.exists()
