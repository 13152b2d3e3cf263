"""The eval runner: every case of every selected suite, concurrently, hooks bypassed by
default.

Hooks are off by default (DESIGN §4): a CI gate's verdict must not hang on a human approval
or a rate limit. `with_hooks=True` or a suite's `hooks: on` opts back in; the report always
says which; a case that would run real tool effects a PreToolUse hook guards, with hooks
bypassed only by default, is refused (`fim.eval.hooks_mode`).
Even then nothing waits on a human: a `confirm` hook's request and an MCP server's question
are answered at once, as the case's `approvals` and `elicitation` say (default: deny and
decline; `fim.eval.execute.answer_requests`).

This module picks the cases (patterns, suites, shard), schedules them within the call
slots, and checks each case's assertions, each on its own (`fim.eval.checking`); running a
case's agent or workflow is `fim.eval.execute`'s (inherited by `EvalRunner`), the results
are `fim.eval.results`'.
"""

from __future__ import annotations

import asyncio
import difflib
import fnmatch
import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import Assertion, EvalCase, EvalSuite
from fim.config.schema.evals import PythonSpec
from fim.errors import FimError
from fim.eval.assertions import JudgeFn, Observed, Outcome, judge_model_ref, model_judge
from fim.eval.case_models import CaseUsage
from fim.eval.cassette_hooks import note_blocked
from fim.eval.cassettes import (
    Cassette,
    CassetteMiss,
    Mode,
    NeedsLiveModel,
    load_all,
    save_all,
    slug,
)
from fim.eval.checking import check_case
from fim.eval.ci import in_shard
from fim.eval.execute import CaseExecutor, CaseInputError, case_payload
from fim.eval.hooks_mode import HooksChoice
from fim.eval.latency import CaseClock, Clock
from fim.eval.python_assertion import case_context, check_python
from fim.eval.results import CaseRun, EvalReport, SuiteResult
from fim.eval.trajectory import calls_of
from fim.eval.warm import warm_up
from fim.llm import wrapping_models
from fim.run.services import Services
from fim.workflows.inputs import InvalidInputs


def _selected(suite: EvalSuite, case: EvalCase, patterns: list[str]) -> bool:
    """Whether `-k` picks the case: a glob on `suite/case` or the suite's name, or a
    substring of `suite/case`, in any case, as pytest's `-k` matches (`-k TIPS` finds the
    `tips` suite)."""
    if not patterns:
        return True
    full, name = f"{suite.name}/{case.name}".casefold(), suite.name.casefold()
    return any(
        fnmatch.fnmatchcase(full, p) or fnmatch.fnmatchcase(name, p) or p in full
        for p in (pattern.casefold() for pattern in patterns)
    )


def near_misses(evals: Mapping[str, EvalSuite], patterns: list[str], limit: int = 3) -> list[str]:
    """The `suite/case` names (or suite names) closest to `-k` patterns that selected
    nothing, best first: `fim eval -k tps` says what it could have meant."""
    names = {suite: suite.casefold() for suite in evals}
    names |= {f"{s}/{c.name}": f"{s}/{c.name}".casefold() for s in evals for c in evals[s].cases}
    by_folded = {folded: name for name, folded in names.items()}
    found: list[str] = []
    for pattern in patterns:
        for folded in difflib.get_close_matches(pattern.casefold(), by_folded, limit, 0.6):
            if by_folded[folded] not in found:
                found.append(by_folded[folded])
    return found[:limit]


_RAISED: list[Any] = [0, None]
"""Eval runs in progress, and the GC threshold they found before the first raised it."""


@contextmanager
def _fewer_young_collections() -> Iterator[None]:
    """A young-generation collection every 10,000 net allocations instead of 700 while an
    eval runs: each case builds hundreds of short-lived objects (events, messages, a plan)
    that reference counting frees, and collecting every 700 spent ~6% of an eval's CPU
    scanning them. The threshold found is restored when the last concurrent run ends."""
    if _RAISED[0] == 0:
        _RAISED[1] = gc.get_threshold()
        gc.set_threshold(max(_RAISED[1][0], 10_000), *_RAISED[1][1:])
    _RAISED[0] += 1
    try:
        yield
    finally:
        _RAISED[0] -= 1
        if _RAISED[0] == 0:
            gc.set_threshold(*_RAISED[1])


class _AnsweredHere(logging.Filter):
    """Drops the hooks' log line of a new approval request during an eval, which answers it
    at once (`fim.eval.execute.answer_requests`): its `approve ... within 300s` would send
    a reader to answer a request that is already decided."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith("approval "))


@contextmanager
def _requests_answered_here() -> Iterator[None]:
    quiet, hooks_log = _AnsweredHere(), logging.getLogger("fim.hooks")
    hooks_log.addFilter(quiet)
    try:
        yield
    finally:
        hooks_log.removeFilter(quiet)


class EvalRunner(CaseExecutor):
    def __init__(
        self,
        snapshot: Snapshot,
        *,
        concurrency: int = 8,
        mode: Mode = "replay",
        with_hooks: HooksChoice = None,
        patterns: list[str] | None = None,
        suites: list[str] | None = None,
        cassette_dir: Path | None = None,
        on_progress: Callable[[CaseRun], None] | None = None,
        shard: tuple[int, int] | None = None,
        model: str | None = None,
        only: set[tuple[str, str]] | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.snapshot = snapshot
        self.only = only
        """(suite, case) names to run, exactly (`fim eval --rerun-failed`); None: all."""
        self.clock = clock
        """What each case's latency is read from (`fim.eval.latency.CaseClock`)."""
        self.model = model
        """`fim eval --model`: the model (a role or litellm string) every agent suite's agent
        runs on instead of its own, as `fim run -m` does; judges keep theirs."""
        self.shard = shard
        """(I, N): run only the cases of shard I of N (`fim.eval.ci.in_shard`)."""
        self.concurrency = max(1, concurrency)
        self.mode = mode
        self.with_hooks = with_hooks
        """`--with-hooks`/`--without-hooks`, the rerun report's modes, or None: each suite's
        `hooks:`, else bypassed (`fim.eval.hooks_mode`)."""
        self._guards = {}
        self.patterns = patterns or []
        self.suite_names = suites
        evals_dir = snapshot.root / snapshot.project.paths.evals
        self.cassette_dir = cassette_dir or evals_dir / ".cassettes"
        if model is not None and cassette_dir is None:  # one model's recording keeps the other's
            self.cassette_dir = self.cassette_dir / f"@{slug(model)}"
        self.on_progress = on_progress
        self._calls = asyncio.Semaphore(self.concurrency)
        self._problems: dict[str, list[Any]] = {}
        """What each suite's live cases are certain to fail on (`_preflight`), per run."""

    def plan(self) -> list[tuple[EvalSuite, EvalCase, int]]:
        """Every (suite, case, attempt) that will run, in a stable order."""
        jobs = []
        for name in sorted(self.snapshot.evals):
            suite = self.snapshot.evals[name]
            if self.suite_names and name not in self.suite_names:
                continue
            for case in suite.cases:
                if (
                    _selected(suite, case, self.patterns)
                    and (self.only is None or (suite.name, case.name) in self.only)
                    and (self.shard is None or in_shard(suite.name, case.name, self.shard))
                ):
                    for attempt in range(1, max(case.repeat, suite.repeat) + 1):
                        jobs.append((suite, case, attempt))
        return jobs

    async def run(self) -> EvalReport:
        with _fewer_young_collections(), _requests_answered_here():
            return await self._run()

    async def _run(self) -> EvalReport:
        started = time.perf_counter()
        jobs = self.plan()
        self._problems = {}
        services = Services(
            root=self.snapshot.root,
            state_url=self.snapshot.project.state,
            record_usage=self.mode != "replay",
            providers=CAPABILITIES,
        )
        # `concurrency` bounds model calls in flight; cases start a little ahead of free
        # call slots so their set-up (and assertions) overlap other cases' calls instead of
        # queueing behind them.
        self._calls = asyncio.Semaphore(self.concurrency)  # bound to this run's loop
        semaphore = asyncio.Semaphore(self.concurrency * 2)
        cassettes: dict[tuple[str, str], Cassette] = {}
        for suite, case, _ in jobs:
            key = (suite.name, case.name)
            if key not in cassettes:
                path = self.cassette_dir / slug(suite.name) / f"{slug(case.name)}.json"
                cassettes[key] = Cassette(path, self.mode, self.snapshot.masker)
                cassettes[key].hooks_now = self.hooks_on(suite)
        await asyncio.to_thread(load_all, list(cassettes.values()))
        calls = self.mode != "replay"
        await asyncio.to_thread(warm_up, self.snapshot, jobs, calls, self.model, services)

        spans: dict[str, tuple[float, float]] = {}
        """Per suite: when its first case started and its last ended (its wall time)."""

        async def one(suite: EvalSuite, case: EvalCase, attempt: int) -> CaseRun:
            async with semaphore:
                begun = time.perf_counter()
                result = await self._run_case(
                    suite, case, attempt, services, cassettes[(suite.name, case.name)]
                )
                first, last = spans.get(suite.name, (begun, begun))
                spans[suite.name] = (min(first, begun), max(last, time.perf_counter()))
            if self.on_progress is not None:
                self.on_progress(result)
            return result

        try:
            runs = await asyncio.gather(*(one(*job) for job in jobs))
        finally:
            await services.aclose()
        await asyncio.to_thread(save_all, list(cassettes.values()))
        by_suite: dict[str, list[CaseRun]] = {}
        for run in runs:
            by_suite.setdefault(run.suite, []).append(run)
        results = [
            SuiteResult(
                self.snapshot.evals[name],
                by_suite[name],
                self.hooks_on(self.snapshot.evals[name]),
                self.model,
                spans[name][1] - spans[name][0],
            )
            for name in sorted(by_suite)
        ]
        return EvalReport(results, time.perf_counter() - started, self.mode)

    async def _run_case(
        self, suite: EvalSuite, case: EvalCase, attempt: int, services: Services, cassette: Cassette
    ) -> CaseRun:
        run = CaseRun(suite=suite.name, case=case.name, attempt=attempt, passed=False)
        run.xfail = case.xfail
        source = self.snapshot.case_source(suite.name, case.name)
        if source is not None:
            run.file, run.line = source.path, source.line
        if self.mode == "replay" and not cassette.recorded:
            live = self._live_model(suite)
            if live is not None:  # known up front: nothing of the case runs
                run.skipped = str(NeedsLiveModel(live, cassette.path))
                return run
        refused = self._refused(suite, cassette.recorded, case.name)
        if refused is not None:  # ERROR, not FAIL: nothing ran (`fim.eval.hooks_mode`)
            run.error, run.config_error = refused, True
            return run
        if self.mode == "replay" and cassette.recorded:
            run.replayed, run.unsourced = True, cassette.unsourced
        problems = self._problems.get(suite.name)
        if problems is None and self.mode != "replay":  # the same for every case of a suite
            problems = self._problems[suite.name] = self._preflight(suite)
        if problems:  # in ms, before MCP servers start; ERROR, not FAIL: the agent never ran
            run.error = "; ".join(str(p) for p in problems)
            run.config_error = True
            return run
        try:
            payload = case_payload(case)
        except CaseInputError as exc:  # as `fim validate` says it; the other cases run
            run.error, run.config_error = str(exc), True
            return run
        clock = CaseClock(self.clock)
        usage = CaseUsage() if suite.workflow is not None else None  # an agent's: its run's
        tape = self._tape(cassette)
        try:
            with (
                wrapping_models(self._wrapper(cassette, clock, usage)),
                tape.installed(),
                self._time(cassette),
            ):
                try:
                    seen, prompt = await self._execute(
                        suite, case, payload, services, cassette, run, clock, usage
                    )
                except FimError:
                    tape.raise_miss()  # the tool that was not run is why, not what followed
                    raise
                tape.raise_miss()
        except NeedsLiveModel as exc:
            run.skipped, run.replayed = str(exc), False
            return run
        except CassetteMiss as exc:  # a miss, not a replay: counted once, as a miss
            run.cassette_miss, run.error, run.replayed = True, str(exc), False
            return run
        except InvalidInputs as exc:  # the case's inputs, not its answer: exit 2, as validate
            run.error, run.config_error, run.replayed = str(exc), True, False
            return run
        except FimError as exc:
            run.error = str(exc)
            return run
        clock.stop()
        note_blocked(cassette, calls_of(seen))
        seen.latency_ms = run.latency_ms = clock.elapsed_ms
        run.recorded_latency_ms = clock.recorded_ms
        run.output, run.tokens, run.iterations = seen.output, seen.tokens, seen.iterations
        run.cost = seen.cost
        return await self._check(suite, case, run, seen, prompt, cassette, list(clock.replayed))

    async def _check(
        self,
        suite: EvalSuite,
        case: EvalCase,
        run: CaseRun,
        seen: Observed,
        prompt: str,
        cassette: Cassette,
        replayed: list[float | None],
    ) -> CaseRun:
        """The case's assertions, each on its own (`fim.eval.checking`)."""

        async def python(spec: PythonSpec, output: str) -> Outcome:
            context = case_context(seen, prompt, case.vars, suite.name, case.name)
            return await check_python(self.snapshot, spec, output, context)

        def judge(assertion: Assertion) -> JudgeFn:
            async def ask(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
                model = self._wrap(judge_model_ref(assertion), cassette)
                return await model_judge(model, rubric, prompt, output)

            return ask

        found = await check_case(
            case.expect,
            seen,
            prompt,
            judge=judge,
            python=python,
            judge_model=self._judge_model,
            replayed=replayed,
        )
        run.outcomes = found.outcomes
        if found.miss is not None:  # a judge's miss: counted once, as a miss
            run.cassette_miss, run.error, run.replayed = True, str(found.miss), False
        run.skipped = found.skip
        run.replayed = run.replayed and run.skipped is None
        run.passed = found.passed and run.error is None
        return run

    def _judge_model(self, assertion: Assertion) -> str:
        """The model a judge asks, as its not-checked line names it."""
        ref = judge_model_ref(assertion)
        try:
            model = self.snapshot.model_settings(ref).model
        except FimError:
            return f"the model {ref!r}"
        return f"the model {model}" if model == ref else f"the {ref} model ({model})"


async def run_models(runners: list[EvalRunner]) -> EvalReport:
    """One report over several runners (`fim eval --model A --model B`: one per model),
    run one after the other so `--concurrency` still bounds the calls in flight."""
    started = time.perf_counter()
    suites: list[SuiteResult] = []
    for runner in runners:
        suites += (await runner.run()).suites
    mode = runners[0].mode if runners else "replay"
    return EvalReport(suites, time.perf_counter() - started, mode)
