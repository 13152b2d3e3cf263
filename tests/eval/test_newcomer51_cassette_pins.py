"""A cassette pins what a replayed case depends on, and a miss says what moved (newcomer51
#4, #9).

- A project Python tool's recorded result is kept with its module's file and a hash of its
  source. Replay after the tool's code changed is a cassette miss naming the tool and the
  file, and the changed tool is not run (a cassette alone never makes CI run a tool with
  effects). A result recorded before fim kept the hash is replayed, said once in the log.
- Each recorded model exchange keeps a fingerprint: who asked, the iteration and short
  hashes of the system prompt, tools and messages (no text). A miss says whose request
  missed, which part changed, and what did replay.
- Against a baseline, a case that missed its cassette is a stale cassette: not
  "Regressed", and no token, cost or latency row comes from it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import fim.eval.tool_replay as tool_replay
from fim.build.compile import compile_project
from fim.eval.baseline import compare, text
from fim.eval.ci_markdown import markdown
from fim.eval.runner import EvalRunner
from fim.llm.script import text as reply
from fim.testing.model_server import OpenAIStubServer

ORDERS = '''\
from pathlib import Path


def lookup(order: str) -> dict:
    """Look an order up."""
    Path(__file__).with_name("ran.txt").write_text(order)
    return {"order": order, "status": "STATUS"}
'''


def tool_project(root: Path, status: str) -> Path:
    """An agent whose scripted model calls the project tool `orders:lookup` once."""
    for folder in ("agents", "evals", "hooks"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"order": "1"}}]}, {"text": "ok"}]
    (root / "general.script.yaml").write_text(json.dumps(script))
    (root / "fim.yaml").write_text(
        f"name: t\nstate: sqlite:///{root / 'state.db'}\n"
        "models:\n  general: {model: 'scripted:general.script.yaml'}\n"
    )
    (root / "hooks" / "orders.py").write_text(ORDERS.replace("STATUS", status))
    (root / "agents" / "support.yaml").write_text(
        "description: answers order questions\nmodel: general\ntools: ['orders:lookup']\n"
    )
    case = {"name": "status", "input": "Where is order 1?", "expect": [{"contains": "ok"}]}
    (root / "evals" / "support.yaml").write_text(json.dumps({"agent": "support", "cases": [case]}))
    return root


def cassette(root: Path, suite: str, case: str) -> Path:
    return root / "evals" / ".cassettes" / suite / f"{case}.json"


async def run(root: Path, mode: str = "replay") -> Any:
    return (await EvalRunner(compile_project(root), mode=mode).run()).suites[0].runs[0]  # type: ignore[arg-type]


# ------------------------------------------------------------------ project tools (#4)


async def test_a_tool_whose_code_changed_since_recording_is_a_miss_naming_it(
    tmp_path: Path,
) -> None:
    root = tool_project(tmp_path / "p", "shipped")
    assert (await run(root, "record")).passed
    stored = json.loads(cassette(root, "support", "status").read_text())["tool_calls"][0]
    assert stored["code"]["file"] == "hooks/orders.py"
    assert len(stored["code"]["sha256"]) == 16
    (root / "hooks" / "ran.txt").unlink()

    unchanged = await run(root)
    assert unchanged.passed and not unchanged.cassette_miss, unchanged.error

    tool_project(root, "cancelled")  # the pull request edits the tool, not the cassette
    changed = await run(root)
    assert changed.cassette_miss and not changed.passed
    assert "tool 'lookup' changed since recording (hooks/orders.py)" in str(changed.error)
    assert "fim eval --record" in str(changed.error)
    assert not (root / "hooks" / "ran.txt").exists()  # replay still runs no project tool


async def test_a_change_to_a_module_the_tool_imports_is_a_miss_naming_that_module(
    tmp_path: Path,
) -> None:
    """The tool's own file unchanged, the helper it imports broken by the pull request: the
    recorded result replayed and the gate passed (attack-58 F2)."""
    root = tool_project(tmp_path / "p", "shipped")
    (root / "hooks" / "helper.py").write_text("def status() -> str:\n    return 'shipped'\n")
    orders = (root / "hooks" / "orders.py").read_text()
    (root / "hooks" / "orders.py").write_text(
        "from .helper import status\n" + orders.replace('"STATUS"', "status()")
    )
    assert (await run(root, "record")).passed
    stored = json.loads(cassette(root, "support", "status").read_text())["tool_calls"][0]
    assert set(stored["code"]["files"]) == {"hooks/orders.py", "hooks/helper.py"}
    assert (await run(root)).passed
    (root / "hooks" / "helper.py").write_text("def status() -> str:\n    raise RuntimeError\n")
    changed = await run(root)
    assert changed.cassette_miss and not changed.passed
    assert "tool 'lookup' changed since recording (hooks/helper.py)" in str(changed.error)


async def test_a_result_recorded_before_the_hash_is_replayed_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older cassette is not pinned: it replays as before, never a crash, and the log
    says once that its Python tool results are not checked against the code."""
    monkeypatch.setattr(tool_replay, "_UNPINNED_SAID", False)
    root = tool_project(tmp_path / "p", "shipped")
    assert (await run(root, "record")).passed
    path = cassette(root, "support", "status")
    body = json.loads(path.read_text())
    for call in body["tool_calls"]:
        del call["code"]
    path.write_text(json.dumps(body))
    tool_project(root, "cancelled")

    with caplog.at_level(logging.WARNING, logger="fim.eval.tool_replay"):
        first, second = await run(root), await run(root)
    assert first.passed and second.passed, first.error
    said = [r.getMessage() for r in caplog.records if "pinned" in r.getMessage()]
    assert len(said) == 1
    assert "status.json" in said[0] and "`fim eval --record` pins them" in said[0]


# ------------------------------------------------------------------ which request missed (#9)


def writer_project(root: Path, url: str, rubric: str, instructions: str = "Be polite.") -> Path:
    """An agent on a real (stub) model, graded by a judge on the `fast` role."""
    for folder in ("agents", "evals"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    model = f"{{model: openai/stub, api_base: '{url}', api_key: sk-x, max_retries: 0}}"
    (root / "fim.yaml").write_text(
        f"name: t\nstate: sqlite:///{root / 'state.db'}\n"
        f"models:\n  general: {model}\n  fast: {model}\n"
    )
    (root / "agents" / "writer.yaml").write_text(
        f"description: writes\nmodel: general\ninstructions: {instructions}\n"
    )
    case = {"name": "polite", "input": "Say hi", "expect": [{"judge": rubric}]}
    (root / "evals" / "writer.yaml").write_text(json.dumps({"agent": "writer", "cases": [case]}))
    return root


VERDICT = '{"verdict": "pass", "reason": "polite"}'


async def test_a_rubric_edit_is_the_judges_miss_and_the_agents_call_replayed(
    tmp_path: Path,
) -> None:
    with OpenAIStubServer([reply("Hello there!"), reply(VERDICT)]) as stub:
        root = writer_project(tmp_path / "p", stub.base_url, "The reply is polite")
        assert (await run(root, "record")).passed
        recorded = cassette(root, "writer", "polite").read_text()
        prints = [e["fingerprint"] for e in json.loads(recorded)["exchanges"]]
        assert sorted(p["by"] for p in prints) == ["agent:writer", "judge"]
        assert all(p["iteration"] == 1 for p in prints)
        assert all(len(p[k]) == 12 for p in prints for k in ("system", "tools", "messages"))
        assert "Be polite" not in json.dumps(prints) and "Say hi" not in json.dumps(prints)

        writer_project(root, stub.base_url, "The reply is polite and short")
        missed = await run(root)
    assert missed.cassette_miss
    assert (
        "polite.json: the request of the judge (iteration 1) was not recorded: its messages "
        "changed since recording; replayed: agent 'writer': 1 call"
    ) in str(missed.error)


async def test_an_instructions_edit_names_the_agent_and_its_system_prompt(
    tmp_path: Path,
) -> None:
    with OpenAIStubServer([reply("Hello there!"), reply(VERDICT)]) as stub:
        root = writer_project(tmp_path / "p", stub.base_url, "polite")
        assert (await run(root, "record")).passed
        writer_project(root, stub.base_url, "polite", instructions="Be terse.")
        missed = await run(root)
    assert missed.cassette_miss
    assert (
        "the request of agent 'writer' (iteration 1) was not recorded: its system prompt changed"
    ) in str(missed.error)


# ------------------------------------------------------------------ baseline (#9)


def report(case: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "suites": [{"name": "writer", "model": None, "cases": [case]}]}


def test_a_cassette_miss_against_the_baseline_is_a_stale_cassette_with_no_metric_rows() -> None:
    main = {"case": "polite", "passed": True, "tokens": 506, "cost": 0.01, "latency_ms": 900}
    pr = {
        "case": "polite",
        "passed": False,
        "cassette_miss": True,
        "error": "cassette miss: polite.json: ...",
        "tokens": 0,
        "cost": 0.0,
        "latency_ms": 3,
    }
    comparison = compare(report(pr), report(main))
    assert comparison.regressed == [] and comparison.changes == []
    assert comparison.stale == ["writer/polite"]
    assert comparison.as_dict()["stale"] == ["writer/polite"]
    assert "stale cassette: writer/polite" in text(comparison)
    assert "tokens" not in text(comparison)
    shown = report(pr)
    shown["suites"][0].update(pass_rate=0.0, threshold=1.0, passed=False, agent="writer")
    summary = markdown(shown, comparison)
    assert "- **Stale cassette** (1): `writer/polite`" in summary
    assert "Regressed" not in summary


def test_a_case_that_passed_in_the_baseline_and_is_now_xfail_is_no_longer_tested() -> None:
    """Marking a broken case `xfail:` keeps the gate green by design; the comparison with
    main still names it, and `--fail-on-untested` fails on it."""
    main = {"case": "polite", "passed": True, "tokens": 506, "cost": 0.01, "latency_ms": 900}
    pr = {**main, "passed": False, "status": "xfail", "xfail": "flaky upstream"}
    comparison = compare(report(pr), report(main))
    assert comparison.untested == {"writer/polite": "marked xfail"}
    assert comparison.regressed == []
