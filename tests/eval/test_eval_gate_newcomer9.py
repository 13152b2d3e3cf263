"""`fim eval` as a merge gate a promptfoo user can trust (newcomer9).

1. A judge with no cassette is *not checked*, by name; the case's other checks still run
   and a real failure fails the case and the run (it was a SKIP, exit 0).
2. Calls are priced at the model actually called (`-m ROLE`), behind an `api_base` too;
   `max_cost` with an unknown cost fails closed; budgets price the right model.
3. `latency_ms` is the case's own time, its waits for a call slot left out; a replayed
   case is checked against the latency its cassette recorded, or not checked; `--baseline`
   ignores latency changes of replayed cases.
4. A run in which no case was evaluated exits 1, saying nothing was tested.
5. `--rerun-failed REPORT.json` runs again exactly the cases that failed.
6. The table shows skipped cases and rates over evaluated ones; a miss is not also counted
   as replayed; a failure names its case's `file:line`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.config.schema import EvalSuite
from fim.eval.baseline import compare
from fim.eval.execute import Throttled
from fim.eval.latency import CaseClock
from fim.eval.results import CaseRun, EvalReport, SuiteResult
from fim.llm import catalog
from fim.testing.model_server import OpenAIStubServer
from fim.types import Message, ModelResponse

CHATTY = '- text: "As an AI, I cannot write poems here, sorry."\n'

HIDDEN = """\
agent: chatty
cases:
  - name: off-topic
    input: write me a poem about cats
    expect:
      - not_contains: "As an AI"
      - judge: Politely declines
"""


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scripted agent that answers "As an AI, ..." and a `fast` role on a real model
    (no key, no cassette: the judge cannot be asked in replay)."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "FIM_FAST_MODEL", "CI"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "p"
    for folder in ("agents", "evals"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\n"
        "models:\n  general: openai/gpt-4o-mini\n  fast: openai/gpt-4o-mini\n"
    )
    (root / "evals" / "chatty.script.yaml").write_text(CHATTY)
    (root / "agents" / "chatty.yaml").write_text(
        "model: scripted:evals/chatty.script.yaml\ninstructions: Triage.\n"
    )
    (root / "evals" / "hidden.yaml").write_text(HIDDEN)
    return root


# ------------------------------------------------ 1. a judge with no cassette hides nothing


def test_a_judge_without_cassette_is_not_checked_and_a_real_failure_fails(
    project: Path, tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    code, output = run("eval", "hidden", "-p", str(project), "--json", str(report))
    flat = " ".join(output.split())
    assert code == 1, output
    assert "FAIL" in output and "SKIP" not in output
    assert "not_contains: expected no 'As an AI' in 'As an AI, I cannot" in flat
    assert (
        "judge: 'Politely declines' not checked: it needs the fast model (openai/gpt-4o-mini), "
        "and this case has no cassette" in flat
    )
    assert "0 runs" not in flat
    [case] = json.loads(report.read_text())["suites"][0]["cases"]
    assert case["status"] == "fail" and case["skipped"] is None
    checks = {a["kind"]: a for a in case["assertions"]}
    assert checks["not_contains"]["passed"] is False
    assert checks["judge"]["passed"] is None and checks["judge"]["not_checked"] == "no_cassette"


def test_a_passing_case_with_an_unchecked_judge_passes_and_says_which_judge(
    project: Path,
) -> None:
    (project / "evals" / "hidden.yaml").write_text(HIDDEN.replace("not_contains", "contains"))
    code, output = run("eval", "hidden", "-p", str(project))
    flat = " ".join(output.split())
    assert code == 0, output
    assert "~ hidden / off-topic" in flat and "'Politely declines' not checked" in flat
    assert (  # newcomer-49 #14: the summary's PASS does not hide it
        "note: 1 case passed with a check not checked (named above; its other checks "
        "decided it): `--fail-on-skip` fails on it" in flat
    )
    code, output = run("eval", "hidden", "-p", str(project), "--fail-on-skip")
    assert code == 1
    assert "1 case skipped (no cassette): hidden/off-topic (judge)" in " ".join(output.split())


def test_a_case_whose_only_check_is_an_unchecked_judge_is_skipped_by_the_judge(
    project: Path,
) -> None:
    (project / "evals" / "hidden.yaml").write_text(
        HIDDEN.replace('      - not_contains: "As an AI"\n', "")
    )
    code, output = run("eval", "hidden", "-p", str(project))
    flat = " ".join(output.split())
    assert code == 1  # nothing was tested (4.)
    assert "skipped: judge: 'Politely declines' not checked: it needs the fast model" in flat


# -------------------------------------------------------- 2. priced as the model called


def _priced_project(root: Path, url: str, general_price: bool, haiku_price: bool) -> Path:
    general = ", price: {input_per_mtok: 1, output_per_mtok: 1}" if general_price else ""
    haiku = ", price: {input_per_mtok: 1000, output_per_mtok: 1000}" if haiku_price else ""
    for folder in ("agents", "evals"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\nmodels:\n"
        f"  general: {{model: openai/acme-house-model, api_base: '{url}'{general}}}\n"
        f"  haiku: {{model: openai/acme-other-model, api_base: '{url}'{haiku}}}\n"
    )
    (root / "agents" / "triage.yaml").write_text("model: general\ninstructions: Triage.\n")
    (root / "evals" / "triage.yaml").write_text(
        "agent: triage\ncases:\n  - name: cheap\n    input: hello\n"
        "    expect: [{max_cost: 0.002}]\n"
    )
    return root


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStubServer]:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "FIM_FAST_MODEL", "CI"):
        monkeypatch.delenv(var, raising=False)
    with OpenAIStubServer(handler=lambda request: "billing") as server:
        yield server


def _run_cost(root: Path, *args: str) -> tuple[int, Any]:
    code, output = run("run", "-p", str(root), *args, "triage", "hello", "--json")
    lines = [line for line in output.splitlines() if line.startswith("{")]
    return code, json.loads(lines[-1]) if lines else output


def test_run_with_another_role_is_priced_at_that_roles_price(
    tmp_path: Path, stub: OpenAIStubServer
) -> None:
    root = _priced_project(tmp_path / "p", stub.base_url, general_price=True, haiku_price=True)
    code, data = _run_cost(root, "-m", "haiku")
    assert code == 0, data
    usage = data["usage"]
    tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["cost"] == pytest.approx(tokens * 1000 / 1_000_000)  # haiku's, not general's


def test_max_cost_with_an_unknown_price_fails_closed_naming_the_model(
    tmp_path: Path, stub: OpenAIStubServer
) -> None:
    root = _priced_project(tmp_path / "p", stub.base_url, general_price=True, haiku_price=False)
    code, output = run("eval", "triage", "-p", str(root), "--live", "-m", "haiku")
    flat = " ".join(output.split())
    assert code == 1, output
    assert "max_cost: cost unknown: no price for openai/acme-other-model (set `price:" in flat
    code, output = run("eval", "triage", "-p", str(root), "--live")  # general has a price
    assert code == 0, output


def test_a_budget_prices_the_model_called_and_fails_closed_without_a_price(
    tmp_path: Path, stub: OpenAIStubServer
) -> None:
    budgeted = "model: general\ninstructions: Triage.\nbudget: {max_cost_usd: 0.001}\n"
    root = _priced_project(tmp_path / "p", stub.base_url, general_price=True, haiku_price=True)
    (root / "agents" / "triage.yaml").write_text(budgeted)
    code, _ = _run_cost(root)  # at general's price, a few tokens cost far below $0.001
    assert code == 0
    code, output = run("run", "-p", str(root), "-m", "haiku", "triage", "hello")
    assert code != 0 and "max_cost_usd" in output, output  # at haiku's, above it
    root = _priced_project(tmp_path / "q", stub.base_url, general_price=True, haiku_price=False)
    (root / "agents" / "triage.yaml").write_text(budgeted)
    code, output = run("run", "-p", str(root), "-m", "haiku", "triage", "hello")
    flat = " ".join(output.split())
    assert code != 0 and "openai/acme-other-model" in flat and "price" in flat, output


def test_a_model_behind_an_api_base_gets_its_list_price(
    tmp_path: Path, stub: OpenAIStubServer
) -> None:
    assert catalog.model_info("openai/gpt-4o-mini") is not None
    root = _priced_project(tmp_path / "p", stub.base_url, general_price=False, haiku_price=False)
    text = (root / "fim.yaml").read_text().replace("acme-house-model", "gpt-4o-mini")
    (root / "fim.yaml").write_text(text)
    code, data = _run_cost(root)
    assert code == 0, data
    assert data["usage"]["cost"] is not None and data["usage"]["cost"] > 0


# ---------------------------------------------------------------- 3. a case's own latency


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class SlowModel:
    """Answers after the fake clock moved 0.1 s: the model's own time."""

    name = "slow"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    async def complete(self, messages: list[Message], tools: Any = None, **_: Any) -> Any:
        self.clock.now += 0.1
        return ModelResponse(message=Message(role="assistant", content="ok"))


async def test_the_wait_for_a_call_slot_is_not_the_cases_latency() -> None:
    fake = FakeClock()
    slots = asyncio.Semaphore(1)
    await slots.acquire()  # another case's call holds the only slot
    clock = CaseClock(fake)
    call = asyncio.ensure_future(Throttled(SlowModel(fake), slots, clock).complete([]))
    await asyncio.sleep(0)
    fake.now += 0.8  # the queue: 800 ms
    slots.release()
    await call
    clock.stop()
    assert clock.queued == pytest.approx(0.8)
    assert clock.elapsed_ms == pytest.approx(100.0)


@pytest.fixture
def recorded(tmp_path: Path, stub: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A case recorded against the stub (the model's list price is its role's price)."""
    root = _priced_project(tmp_path / "p", stub.base_url, general_price=True, haiku_price=True)
    (root / "evals" / "triage.yaml").write_text(
        "agent: triage\ncases:\n  - name: quick\n    input: hello\n"
        "    expect: [{latency_ms: 500}]\n"
    )
    code, output = run("eval", "triage", "-p", str(root), "--record")
    assert code == 0, output
    return root


def _set_duration(root: Path, value: float | None) -> None:
    path = root / "evals" / ".cassettes" / "triage" / "quick.json"
    data = json.loads(path.read_text())
    for exchange in data["exchanges"]:
        assert isinstance(exchange["duration_ms"], float)  # --record stores it
        exchange.pop("duration_ms")
        if value is not None:
            exchange["duration_ms"] = value
    path.write_text(json.dumps(data))


def test_a_replayed_latency_is_the_recorded_one(recorded: Path, tmp_path: Path) -> None:
    _set_duration(recorded, 900.0)  # the model took 900 ms when recorded
    report = tmp_path / "r.json"
    code, output = run("eval", "triage", "-p", str(recorded), "--json", str(report))
    assert code == 1, output
    assert "latency_ms: expected <= 500 ms, the recorded model calls took 900 ms" in output
    [case] = json.loads(report.read_text())["suites"][0]["cases"]
    assert case["recorded_latency_ms"] == 900.0 and case["replayed"]


def test_a_replayed_latency_the_cassette_did_not_record_is_not_checked(recorded: Path) -> None:
    _set_duration(recorded, None)  # a cassette from before durations were stored
    code, output = run("eval", "triage", "-p", str(recorded))
    flat = " ".join(output.split())
    assert code == 1, output  # its only check was not checked: nothing was tested
    assert "latency_ms: not checked (replayed: the cassette holds no recorded latency" in flat


def _report(latency: float, replayed: bool) -> dict[str, Any]:
    case = {"case": "c", "passed": True, "latency_ms": latency, "replayed": replayed}
    return {"suites": [{"name": "s", "cases": [case]}]}


def test_the_baseline_ignores_the_latency_of_replayed_cases() -> None:
    assert compare(_report(12.8, True), _report(243.5, True)).changes == []
    assert compare(_report(12.8, True), _report(243.5, False)).changes == []
    [change] = compare(_report(80.0, False), _report(243.5, False)).changes
    assert change.metric == "latency_ms"


# ------------------------------------------------------------- 4. nothing tested is no pass


@pytest.fixture
def unrecorded(project: Path) -> Path:
    (project / "agents" / "real.yaml").write_text("model: general\ninstructions: Answer.\n")
    (project / "evals" / "real.yaml").write_text(
        "agent: real\ncases:\n  - {name: a, input: hi, expect: [{contains: hi}]}\n"
        "  - {name: b, input: ho, expect: [{contains: ho}]}\n"
    )
    return project


def test_a_run_where_every_case_was_skipped_fails_saying_nothing_was_tested(
    unrecorded: Path, tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    code, output = run("eval", "real", "-p", str(unrecorded), "--json", str(report))
    flat = " ".join(output.split())
    assert code == 1, output
    assert flat.count("nothing was tested: all 2 cases were skipped: needs a live model") == 1
    code, output = run("eval", "merge", str(report))
    assert code == 1 and "nothing was tested" in output
    code, summary = run("eval", "merge", str(report), "--format", "markdown")
    assert summary.startswith("## fim eval: ❌ nothing was tested")


def test_some_cases_skipped_pass_without_fail_on_skip(unrecorded: Path) -> None:
    (unrecorded / "evals" / "hidden.yaml").write_text(HIDDEN.replace("not_contains", "contains"))
    code, output = run("eval", "-p", str(unrecorded))
    assert code == 0, output
    assert "nothing was tested" not in output


# ----------------------------------------------------------------- 5. re-run what failed

RERUN = """\
agent: chatty
cases:
  - {name: "a*", input: one, expect: [{contains: "sonnet"}]}
  - {name: ab, input: two, expect: [{contains: "As an AI"}]}
  - {name: "odd [x]", input: three, expect: [{contains: "nope"}]}
"""


def test_rerun_failed_runs_exactly_the_failed_cases(project: Path, tmp_path: Path) -> None:
    (project / "evals" / "rerun.yaml").write_text(RERUN)
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    code, _ = run("eval", "rerun", "-p", str(project), "--json", str(first))
    assert code == 1
    code, output = run(
        "eval", "-p", str(project), "--rerun-failed", str(first), "--json", str(again)
    )
    assert code == 1, output
    cases = [c["case"] for s in json.loads(again.read_text())["suites"] for c in s["cases"]]
    assert sorted(cases) == ["a*", "odd [x]"]  # not `ab`, which the glob `a*` matches


def test_rerun_failed_says_when_there_is_nothing_to_rerun(project: Path, tmp_path: Path) -> None:
    (project / "evals" / "rerun.yaml").write_text(
        RERUN.replace('"nope"', '"AI"').replace('"sonnet"', '"cannot"')
    )
    report = tmp_path / "r.json"
    code, _ = run("eval", "rerun", "-p", str(project), "--json", str(report))
    assert code == 0
    code, output = run("eval", "-p", str(project), "--rerun-failed", str(report))
    assert code == 0 and "no failed case in this report, nothing to re-run" in output


def test_rerun_failed_says_when_the_report_is_of_another_project(
    project: Path, tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    other = {"suites": [{"name": "billing", "cases": [{"case": "x", "status": "fail"}]}]}
    report.write_text(json.dumps(other))
    code, output = run("eval", "-p", str(project), "--rerun-failed", str(report))
    flat = " ".join(output.split())
    assert code == 2
    assert "none of its failed cases is in this project (billing/x)" in flat
    code, output = run("eval", "hidden", "-p", str(project), "--rerun-failed", str(report))
    assert code == 2 and "its failed cases are in billing, not in hidden" in output


# --------------------------------------------------------------------------- 6. reporting


def test_the_table_shows_skipped_cases_and_rates_over_evaluated_ones(unrecorded: Path) -> None:
    (unrecorded / "evals" / "hidden.yaml").write_text(HIDDEN.replace("not_contains", "contains"))
    code, output = run("eval", "-p", str(unrecorded))
    assert code == 0, output
    header = next(line for line in output.splitlines() if "suite" in line)
    assert "skipped" in header  # a column of the table
    assert "rate: of the cases evaluated (1 of 3; 2 skipped)" in output


def test_a_failure_names_its_cases_file_and_line(project: Path) -> None:
    code, output = run("eval", "hidden", "-p", str(project))
    assert code == 1
    assert "✗ hidden / off-topic  evals/hidden.yaml:3" in output


def test_a_cassette_miss_is_not_also_counted_as_replayed(recorded: Path, tmp_path: Path) -> None:
    (recorded / "agents" / "triage.yaml").write_text("model: general\ninstructions: Changed.\n")
    report = tmp_path / "r.json"
    code, output = run("eval", "triage", "-p", str(recorded), "--json", str(report))
    flat = " ".join(output.split())
    assert code == 1 and "1 cassette miss" in flat
    assert "replayed from cassettes" not in flat
    data = json.loads(report.read_text())
    assert data["cases_replayed"] == 0


def test_a_report_with_cases_planned_and_none_evaluated_exits_1() -> None:
    suite = EvalSuite(name="s", agent="a", cases=[{"name": "c", "input": "hi"}])
    skipped = CaseRun(suite="s", case="c", attempt=1, passed=False, skipped="no cassette")
    assert EvalReport([SuiteResult(suite, [skipped], False)], 0.0, "replay").exit_code == 1
    assert EvalReport([], 0.0, "replay").exit_code == 0
