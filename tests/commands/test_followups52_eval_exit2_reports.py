"""Every `fim eval` exit 2 that stops before any case runs writes the reports asked for.

A configuration error already wrote `--junit`, `--markdown` and `--json` (newcomer55 #8),
but other exit-2 paths said their problem on stderr and wrote no file, so the CI step
posting the JUnit report or the PR comment had nothing to show: a `--model` problem, no
case selected, a bad `--shard`, an unreadable `--rerun-failed` report, `fim eval merge` of
an unreadable report, and the refusal to run real tool effects a bypassed hook guards.
Each now writes every report asked for, with the same words as stderr."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fim.cli import app
from tests.eval_projects import REPO, eval_project

TOOLS = '''\
def issue_refund(order_id: str) -> dict:
    """Refund an order (not read-only: money leaves)."""
    raise AssertionError("a refused eval runs nothing")
'''
GUARD = """\
from fim.hooks.base import PreToolUseHook


class RefundLimit(PreToolUseHook):
    matcher = "issue_refund"

    async def __call__(self, context):
        return self.block("refunds need a human")
"""


def demo(tmp_path: Path) -> list[str]:
    """The offline demo agent and its suite (one case, replayed from a script)."""
    root = eval_project(tmp_path / "p")
    (root / "evals" / "demo.yaml").write_text((REPO / "evals" / "demo.yaml").read_text())
    return ["eval", "--project", str(root)]


def guarded(tmp_path: Path) -> list[str]:
    root = eval_project(tmp_path / "g", demo=False)
    (root / "hooks").mkdir()
    (root / "hooks" / "orders.py").write_text(TOOLS)
    (root / "hooks" / "guards.py").write_text(GUARD)
    (root / "agents" / "support.yaml").write_text(
        "model: scripted:evals/support.script.yaml\ninstructions: Escalate refunds.\n"
        "tools: [orders:issue_refund]\nhooks:\n  - python: guards:RefundLimit\n"
    )
    (root / "evals" / "support.script.yaml").write_text(
        "- tool_calls: [{name: issue_refund, arguments: {order_id: A1}}]\n- text: escalated\n"
    )
    (root / "evals" / "support.yaml").write_text(
        "agent: support\ncases:\n  - name: refund\n    input: Refund A1\n"
        "    expect:\n      - icontains: escalat\n"
    )
    return ["eval", "--project", str(root)]


def unreadable(tmp_path: Path) -> str:
    path = tmp_path / "report.json"
    path.write_text("{not json")
    return str(path)


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "--model": (
        lambda t: [*demo(t), "--model", "nosuchrole"],
        "--model nosuchrole",
    ),
    "no cases selected": (
        lambda t: [*demo(t), "-k", "zzz-nothing"],
        "no eval cases match -k 'zzz-nothing'",
    ),
    "--shard": (lambda t: [*demo(t), "--shard", "3/2"], "invalid shard '3/2'"),
    "--rerun-failed": (
        lambda t: [*demo(t), "--rerun-failed", unreadable(t)],
        "report.json",
    ),
    "merge": (lambda t: ["eval", "merge", unreadable(t)], "report.json"),
    "hooks refusal": (guarded, "declares the PreToolUse hook guards:RefundLimit"),
}


@pytest.mark.parametrize("path", list(CASES))
def test_an_exit_2_before_any_case_still_writes_junit_markdown_and_json(
    tmp_path: Path, path: str
) -> None:
    command, said = CASES[path]
    xml, md, out = tmp_path / "o" / "j.xml", tmp_path / "o" / "s.md", tmp_path / "o" / "r.json"
    args = [*command(tmp_path), "--junit", str(xml), "--markdown", str(md), "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())

    root = ET.parse(xml).getroot()
    errors = [e for e in root.iter("error") if e.get("type") == "config_error"]
    assert errors and int(root.get("errors") or 0) == len(errors)
    assert any(said in " ".join((e.text or "").split()) for e in errors)
    summary = md.read_text()
    assert summary.startswith("## fim eval: ❌ configuration error")
    data = json.loads(out.read_text())
    assert data["errored"] is True and data["ok"] is False and data["suites"] == []
    assert any(said in " ".join(p["message"].split()) for p in data["problems"])
