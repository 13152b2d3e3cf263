"""The eval runner: every case of every selected suite, concurrently, hooks bypassed.

Hooks are off on purpose (DESIGN §4): automated evaluation must not wait on a human
approval or a rate limit. `with_hooks=True` opts back in; the report always says which.
"""

from __future__ import annotations

import asyncio
import fnmatch
import gc
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import EvalCase, EvalSuite, ModelSettings
from fim.errors import FimError
from fim.eval.assertions import Observed, Outcome, check, judge_model_ref, model_judge
from fim.eval.cassettes import (
    NEEDS_LIVE,
    Cassette,
    CassetteMiss,
    CassetteModel,
    Mode,
    NeedsLiveModel,
    slug,
)
from fim.eval.ci import in_shard
from fim.events import RunFinished
from fim.llm import ModelWrapper, make_model, wrapping_models
from fim.run.services import Services
from fim.types import Message, Model


@dataclass
class CaseRun:
    suite: str
    case: str
    attempt: int
    passed: bool
    outcomes: list[Outcome] = field(default_factory=list)
    output: str = ""
    error: str | None = None
    cassette_miss: bool = False
    skipped: str | None = None
    """Why the case did not run (replay, no cassette, a live model needed); not a failure."""
    latency_ms: float = 0.0
    tokens: int = 0
    iterations: int = 0
    trace: list[Any] = field(default_factory=list, repr=False)
    """The run's events; serialised only when a report asks (most cases pass unread)."""

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e.model_dump(mode="json") for e in self.trace]

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "case": self.case,
            "attempt": self.attempt,
            "passed": self.passed,
            "error": self.error,
            "cassette_miss": self.cassette_miss,
            "skipped": self.skipped,
            "output": self.output,
            "latency_ms": round(self.latency_ms, 1),
            "tokens": self.tokens,
            "iterations": self.iterations,
            "assertions": [o.as_dict() for o in self.outcomes],
            "trace": self.events,
        }


@dataclass
class SuiteResult:
    suite: EvalSuite
    runs: list[CaseRun]
    hooks: bool

    @property
    def ran(self) -> list[CaseRun]:
        """The runs that were not skipped: the pass rate is over these."""
        return [r for r in self.runs if r.skipped is None]

    @property
    def skipped(self) -> bool:
        """Every case was skipped: the suite says nothing, neither pass nor fail."""
        return bool(self.runs) and not self.ran

    @property
    def pass_rate(self) -> float:
        ran = self.ran
        return sum(r.passed for r in ran) / len(ran) if ran else 1.0

    @property
    def passed(self) -> bool:
        return self.pass_rate >= self.suite.threshold


@dataclass
class EvalReport:
    suites: list[SuiteResult]
    duration_s: float
    mode: Mode

    @property
    def ok(self) -> bool:
        return all(s.passed for s in self.suites)


def _selected(suite: EvalSuite, case: EvalCase, patterns: list[str]) -> bool:
    if not patterns:
        return True
    full = f"{suite.name}/{case.name}"
    return any(
        fnmatch.fnmatch(full, p) or fnmatch.fnmatch(suite.name, p) or p in full for p in patterns
    )


def _render(value: Any, variables: dict[str, Any]) -> Any:
    if not variables:
        return value
    # deferred: loading jinja2 costs a few ms
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined)

    def go(v: Any) -> Any:
        if isinstance(v, str):
            return env.from_string(v).render(**variables)
        if isinstance(v, list):
            return [go(x) for x in v]
        if isinstance(v, dict):
            return {k: go(x) for k, x in v.items()}
        return v

    return go(value)


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


class Throttled:
    """A model whose calls wait for a slot: the runner's bound on calls in flight."""

    def __init__(self, inner: Model, slots: asyncio.Semaphore) -> None:
        self.inner = inner
        self.name = inner.name
        self.slots = slots

    async def complete(self, messages: list[Message], tools: Any = None, **options: Any) -> Any:
        async with self.slots:
            return await self.inner.complete(messages, tools, **options)

    async def stream(self, messages: list[Message], tools: Any = None, **options: Any) -> Any:
        async with self.slots:
            async for chunk in self.inner.stream(messages, tools, **options):
                yield chunk


class EvalRunner:
    def __init__(
        self,
        snapshot: Snapshot,
        *,
        concurrency: int = 8,
        mode: Mode = "replay",
        with_hooks: bool = False,
        patterns: list[str] | None = None,
        suites: list[str] | None = None,
        cassette_dir: Path | None = None,
        on_progress: Callable[[CaseRun], None] | None = None,
        shard: tuple[int, int] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.shard = shard
        """(I, N): run only the cases of shard I of N (`fim.eval.ci.in_shard`)."""
        self.concurrency = max(1, concurrency)
        self.mode = mode
        self.with_hooks = with_hooks
        self.patterns = patterns or []
        self.suite_names = suites
        evals_dir = snapshot.root / snapshot.project.paths.evals
        self.cassette_dir = cassette_dir or evals_dir / ".cassettes"
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
                if _selected(suite, case, self.patterns) and (
                    self.shard is None or in_shard(suite.name, case.name, self.shard)
                ):
                    for attempt in range(1, max(case.repeat, suite.repeat) + 1):
                        jobs.append((suite, case, attempt))
        return jobs

    async def run(self) -> EvalReport:
        with _fewer_young_collections():
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

        async def one(suite: EvalSuite, case: EvalCase, attempt: int) -> CaseRun:
            async with semaphore:
                result = await self._run_case(
                    suite, case, attempt, services, cassettes[(suite.name, case.name)]
                )
            if self.on_progress is not None:
                self.on_progress(result)
            return result

        try:
            runs = await asyncio.gather(*(one(*job) for job in jobs))
        finally:
            await services.aclose()
        for cassette in cassettes.values():
            cassette.save()
        by_suite: dict[str, list[CaseRun]] = {}
        for run in runs:
            by_suite.setdefault(run.suite, []).append(run)
        results = [
            SuiteResult(self.snapshot.evals[name], by_suite[name], self.with_hooks)
            for name in sorted(by_suite)
        ]
        return EvalReport(results, time.perf_counter() - started, self.mode)

    # ------------------------------------------------------------------ one case

    def _wrapper(self, cassette: Cassette) -> ModelWrapper:
        """How every model of a case is built: behind the case's cassette (scripted models
        need none) and the `--concurrency` call slots."""

        def wrap(settings: ModelSettings, make: Callable[[], Model]) -> Model:
            if settings.model.startswith("scripted:"):
                return make()

            def build() -> Model:
                return Throttled(make(), self._calls)

            if self.mode == "live":
                return build()
            return CassetteModel(settings.model, build, cassette)

        return wrap

    def _wrap(self, ref: Any, cassette: Cassette) -> Model:
        """The model `ref` names, built as the models of a case are."""
        with wrapping_models(self._wrapper(cassette)):
            return make_model(self.snapshot.model_settings(ref), self.snapshot.root)

    def _preflight(self, suite: EvalSuite) -> list[Any]:
        """What a live case of `suite` is certain to fail on (a missing key...), as RunErrors:
        the case fails with that line instead of starting its agent."""
        # deferred: loading fim.run.preflight costs tens of ms
        from fim.run.preflight import agent_problems, workflow_problems

        if suite.agent is not None and suite.agent in self.snapshot.agents:
            return agent_problems(self.snapshot, self.snapshot.agents[suite.agent])
        workflow = self.snapshot.workflows.get(suite.workflow or "")
        return workflow_problems(self.snapshot, workflow) if workflow is not None else []

    def _live_model(self, suite: EvalSuite) -> str | None:
        """A real (not scripted) model the suite's target certainly asks: the agent's own, or
        one of a workflow's `llm` nodes or `agent` nodes' agents. In replay without a
        cassette such a case is skipped before it starts, so a workflow's side effects never
        run ahead of a model call that cannot be answered."""
        refs: list[Any] = []
        if suite.agent is not None and suite.agent in self.snapshot.agents:
            refs.append(self.snapshot.agents[suite.agent].model)
        workflow = self.snapshot.workflows.get(suite.workflow or "")
        for node in workflow.nodes.values() if workflow is not None else ():
            uses = node.uses()
            refs += uses.models
            agents = self.snapshot.agents
            refs += [agents[name].model for name in uses.agents if name in agents]
        for ref in refs:
            model = self.snapshot.model_settings(ref).model
            if not model.startswith("scripted:"):
                return model
        return None

    async def _run_case(
        self, suite: EvalSuite, case: EvalCase, attempt: int, services: Services, cassette: Cassette
    ) -> CaseRun:
        run = CaseRun(suite=suite.name, case=case.name, attempt=attempt, passed=False)
        if self.mode == "replay" and not cassette.recorded:
            live = self._live_model(suite)
            if live is not None:  # known up front: nothing of the case runs
                run.skipped = str(NeedsLiveModel(live, cassette.path))
                return run
        problems = self._problems.get(suite.name)
        if problems is None and self.mode != "replay":  # the same for every case of a suite
            problems = self._problems[suite.name] = self._preflight(suite)
        if problems:
            run.error = "; ".join(str(p) for p in problems)  # in ms, before MCP servers start
            return run
        t0 = time.perf_counter()
        try:
            with wrapping_models(self._wrapper(cassette)):  # this case's task only
                seen, prompt = await self._execute(suite, case, services, cassette, run)
        except NeedsLiveModel as exc:
            run.skipped = str(exc)
            return run
        except CassetteMiss as exc:
            run.cassette_miss, run.error = True, str(exc)
            return run
        except FimError as exc:
            run.error = str(exc)
            return run
        seen.latency_ms = run.latency_ms = (time.perf_counter() - t0) * 1000
        run.output, run.tokens, run.iterations = seen.output, seen.tokens, seen.iterations

        async def judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
            model = self._wrap(judge_model_ref(assertion), cassette)
            return await model_judge(model, rubric, prompt, output)

        for assertion in case.expect:
            try:
                run.outcomes.append(await check(assertion, seen, judge, prompt))
            except NeedsLiveModel as exc:  # e.g. a judge on a real model, never recorded
                run.skipped = str(exc)
                return run
            except CassetteMiss as exc:
                run.cassette_miss, run.error = True, str(exc)
                return run
            except FimError as exc:
                run.outcomes.append(Outcome(assertion.kind, False, f"could not check: {exc}"))
        run.passed = all(o.passed for o in run.outcomes) and run.error is None
        return run

    async def _execute(
        self, suite: EvalSuite, case: EvalCase, services: Services, cassette: Cassette, run: CaseRun
    ) -> tuple[Observed, str]:
        payload = _render(case.input, case.vars)
        if suite.workflow is not None:
            return await self._execute_workflow(suite.workflow, payload, services, run)
        # deferred: loading fim.engines.dag costs hundreds of ms
        from fim.run.agent import run_agent

        agent = self.snapshot.agent(suite.agent or "")
        if isinstance(payload, str):
            conversation: str | list[Message] = payload
            prompt = payload
        elif isinstance(payload, list):
            conversation = [Message.model_validate(m) for m in payload]
            prompt = next((m.content or "" for m in reversed(conversation) if m.role == "user"), "")
        else:
            raise FimError(f"case '{case.name}': an agent case needs text or a list of messages")
        final: RunFinished | None = None
        events = []
        async for event in run_agent(
            self.snapshot, agent.name, conversation, services=services, hooks=self.with_hooks
        ):
            events.append(event)
            if event.type == "error" and event.kind == "model_error":
                if NEEDS_LIVE in event.message:
                    raise NeedsLiveModel.from_message(event.message)
                if "cassette miss" in event.message:
                    raise CassetteMiss(event.message)
            if isinstance(event, RunFinished):
                final = event
        run.trace = events
        if final is None:
            raise FimError("the run ended without a result")
        if final.status == "error":
            raise FimError(final.output)
        structured = None
        try:
            structured = json.loads(final.output)
        except ValueError:
            structured = None
        return Observed(
            output=final.output,
            events=events,
            iterations=final.iterations,
            tokens=final.usage.total_tokens,
            cost=final.usage.cost,
            structured=structured,
        ), prompt

    async def _execute_workflow(
        self, name: str, payload: Any, services: Services, run: CaseRun
    ) -> tuple[Observed, str]:
        # deferred: loading fim.workflows.engine costs tens of ms
        from fim.workflows.engine import WorkflowEngine

        if not isinstance(payload, dict):
            raise FimError(f"a workflow case needs a mapping of inputs for '{name}'")
        engine = WorkflowEngine(self.snapshot, name, services, hooks=self.with_hooks)
        events = [event async for event in engine.run(payload)]
        run.trace = events
        finished = next((e for e in reversed(events) if e.type == "workflow_finished"), None)
        if finished is None or finished.status != "ok":
            raise FimError(
                f"workflow '{name}' ended {getattr(finished, 'status', 'without a result')}"
            )
        outputs = finished.outputs
        text = json.dumps(outputs, ensure_ascii=False, default=str)
        if len(outputs) == 1:
            only = next(iter(outputs.values()))
            text = only if isinstance(only, str) else text
        tool_events = [e for e in events if e.type == "tool_call"]
        return Observed(output=text, events=tool_events, structured=outputs), json.dumps(payload)
