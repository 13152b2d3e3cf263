"""One eval case's target, run: the agent or workflow a suite names, with every model it
builds behind the case's cassette and the runner's call slots, and what it observed
(`Observed`) for the assertions.

Its own module because this is where an eval reaches the run-time layers (models,
preflight, `run_agent`, the workflow engine); `fim.eval.runner` schedules the cases and
checks the assertions. `EvalRunner` inherits these methods.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from fim.build.eval_checks import case_input_problems, vars_hint
from fim.build.instruction_time import rendering_time
from fim.build.snapshot import Snapshot
from fim.config.schema import EvalCase, EvalSuite, ModelSettings
from fim.config.schema.evals import ApprovalAnswers, ElicitationAnswer
from fim.errors import FimError
from fim.eval.assertions import Observed
from fim.eval.case_models import CaseUsage, Tallied, Throttled
from fim.eval.cassettes import (
    NEEDS_LIVE,
    Cassette,
    CassetteMiss,
    CassetteModel,
    Mode,
    NeedsLiveModel,
    slug,
)
from fim.eval.hooks_mode import HooksChoice, effects_of, refusal, suite_hooks
from fim.eval.latency import CaseClock, Clock
from fim.eval.model_endpoints import endpoint_of as endpoint_of
from fim.eval.model_endpoints import litellm_env_base as litellm_env_base
from fim.eval.results import CaseRun
from fim.eval.tool_replay import ToolTape
from fim.events import RunFinished
from fim.llm import ModelWrapper, make_model, wrapping_models
from fim.run.services import Services
from fim.types import Message, Model


def _render(value: Any, variables: dict[str, Any]) -> Any:
    """A case's input with its `vars` filled in, by the workflow templates' renderer: its
    guards refuse what would build a huge value (`9 ** (9 ** 8)`, a 400 MB `center`) before
    it is built, on the event loop `fim serve` shares."""
    if not variables:
        return value
    # deferred: loading jinja2 costs a few ms
    from fim.workflows.templates import render_text

    def go(v: Any) -> Any:
        if isinstance(v, str):
            return render_text(v, variables)
        if isinstance(v, list):
            return [go(x) for x in v]
        if isinstance(v, dict):
            return {k: go(x) for k, x in v.items()}
        return v

    return go(value)


class CaseInputError(FimError):
    """A case's input that cannot render with its vars: the case's ERROR (a configuration
    problem, exit 2, as `fim validate` reports it), never a traceback that stops the eval."""


_NODE_HINT = " (check the name; nodes are only visible once they finished)"
"""The workflow renderer's hint, which means nothing in a case."""


def case_payload(case: EvalCase) -> Any:
    """The case's input with its vars filled in, or CaseInputError with the message `fim
    validate` gives (`fim.build.eval_checks.case_input_problems`); what only rendering
    finds (`{{ total.cents }}` on a text var) is said with the case's vars too."""
    problems = case_input_problems(case)
    if problems:
        raise CaseInputError("; ".join(f"{message} ({hint})" for _, message, hint in problems))
    # deferred: loading jinja2 costs a few ms
    from fim.workflows.templates import TemplateError

    try:
        return _render(case.input, case.vars)
    except TemplateError as exc:
        text = str(exc).replace(_NODE_HINT, "")
        raise CaseInputError(f"input: {text} ({vars_hint(case)})") from None


_TRAJECTORY = frozenset({"tool_call", "hook", "tool_result"})
"""A workflow's events its case's trajectory checks read (`fim.eval.trajectory`)."""

EVAL_ANSWERER = "fim eval"
"""Who decided an approval an eval answered, as the state store records it."""


def approval_answer(case: EvalCase, tool: str) -> tuple[bool, str]:
    """(approved, note) for a `confirm` request to call `tool` in `case` (`approvals`)."""
    answers = case.approvals
    if answers == "approve":
        return True, "the eval case says approvals: approve"
    if isinstance(answers, ApprovalAnswers) and tool in answers.approve:
        return True, f"the eval case approves {tool} (approvals: {{approve: [...]}})"
    return False, (
        "nobody can answer in an eval, and the case says to deny "
        "(`approvals: approve` on the case approves)"
    )


async def answer_requests(event: Any, case: EvalCase, services: Services) -> None:
    """Answer at once a request for a human the run just announced (a `Notice` naming a
    pending approval): a `confirm` hook's by the case's `approvals`, an MCP server's
    question by its `elicitation`. Nobody can answer in an eval; left pending, each would
    hold the case for the hook's or server's whole timeout (300 s by default). Recorded as
    `fim approvals approve|deny` records a decision, by `fim eval`."""
    approval_id = event.data.get("approval_id") if event.type == "notice" else None
    if not approval_id:
        return
    # deferred: loading the state store costs tens of ms
    from fim.store import get_store

    store = get_store(services)
    pending = await store.get_approval(approval_id)
    if pending is None or pending.status != "pending":
        return
    if pending.kind == "tool":
        approved, note = approval_answer(case, pending.tool_name)
        await store.resolve_approval(approval_id, approved, by=EVAL_ANSWERER, data={"note": note})
    elif pending.kind == "elicitation":  # fim.mcp.elicitation.KIND
        answer = case.elicitation
        if isinstance(answer, ElicitationAnswer):
            data: dict[str, Any] = {"content": answer.accept, "note": "the eval case accepts"}
            await store.resolve_approval(approval_id, True, by=EVAL_ANSWERER, data=data)
        else:
            data = {"note": f"the eval case says elicitation: {answer}"}
            if answer == "cancel":
                data["action"] = "cancel"
            await store.resolve_approval(approval_id, False, by=EVAL_ANSWERER, data=data)


class CaseExecutor:
    """The case-running half of `fim.eval.runner.EvalRunner` (the attributes it sets,
    declared here for the methods that read them)."""

    snapshot: Snapshot
    mode: Mode
    with_hooks: HooksChoice
    model: str | None
    clock: Clock
    _calls: asyncio.Semaphore
    _guards: dict[str, Any]
    cassette_dir: Path

    def hooks_on(self, suite: EvalSuite) -> bool:
        """Whether the suite's cases run with hooks (`fim.eval.hooks_mode.suite_hooks`)."""
        return suite_hooks(self.with_hooks, suite)[0]

    def _refused(self, suite: EvalSuite, recorded: bool, case: str) -> str | None:
        """Why the case is not run: it would execute real tool effects a PreToolUse hook
        guards with hooks bypassed only by default (`fim.eval.hooks_mode`); else None."""
        if suite_hooks(self.with_hooks, suite) != (False, False):
            return None
        effects = effects_of(self.mode, recorded, case)
        if effects is None:
            return None
        return refusal(self.snapshot, suite, effects, self._guards)

    def refusals(self, jobs: list[tuple[EvalSuite, EvalCase, int]]) -> list[str]:
        """The refusals (`_refused`) of the cases `jobs` would run, each once: `fim eval`
        says them and exits 2 before any case runs."""
        found: list[str] = []
        for suite, case, _ in jobs:
            if self.mode == "replay" and self._live_model(suite) is not None:
                continue  # skipped without a cassette, run from it with one: nothing real
            path = self.cassette_dir / slug(suite.name) / f"{slug(case.name)}.json"
            said = self._refused(suite, path.is_file(), case.name)
            if said is not None and said not in found:
                found.append(said)
        return found

    def _wrapper(
        self, cassette: Cassette, clock: CaseClock | None = None, usage: CaseUsage | None = None
    ) -> ModelWrapper:
        """How every model of a case is built: behind the case's cassette (scripted models
        need none) and the `--concurrency` call slots, outside it: a reply is recorded with
        its call's own duration, its wait for a slot told to the case's `clock` instead.
        `usage`: a workflow case's meter, which counts every call (`Tallied`)."""

        def wrap(settings: ModelSettings, make: Callable[[], Model]) -> Model:
            model = build(settings, make)
            return model if usage is None else Tallied(model, usage, settings)

        def build(settings: ModelSettings, make: Callable[[], Model]) -> Model:
            if settings.model.startswith("scripted:"):
                return make()
            model: Model
            if self.mode == "live":
                model = make()
            else:
                model = CassetteModel(
                    settings.model,
                    make,
                    cassette,
                    endpoint_of(settings),
                    settings=settings,
                    clock=clock.clock if clock is not None else self.clock,
                    on_replay=clock.replay if clock is not None else None,
                )
            return Throttled(model, self._calls, clock, settings)

        return wrap

    def _time(self, cassette: Cassette) -> AbstractContextManager[None]:
        """The `now` a case's instructions render with (`fim.build.instruction_time`): the
        cassette's, recorded with it and replayed from it (`Cassette.now_for`), so a replayed
        request is the recorded one; live, the current time."""
        return nullcontext() if self.mode == "live" else rendering_time(cassette.now_for)

    def _tape(self, cassette: Cassette) -> ToolTape:
        """How a case's tool calls run (`fim.eval.tool_replay`): recorded with `--record`,
        replayed from a recorded cassette (effects never run), for real with `--live`. A
        case with no cassette in replay runs only if its models are scripted (a real one
        is skipped): the script is reviewed like the agent, so its calls run as before."""
        active = self.mode == "record" or (self.mode == "replay" and cassette.recorded)
        return ToolTape(cassette, active=active)

    def _wrap(self, ref: Any, cassette: Cassette, clock: CaseClock | None = None) -> Model:
        """The model `ref` names, built as the models of a case are."""
        with wrapping_models(self._wrapper(cassette, clock)):
            return make_model(self.snapshot.model_settings(ref), self.snapshot.root)

    def _preflight(self, suite: EvalSuite) -> list[Any]:
        """What a live case of `suite` is certain to fail on (a missing key...), as RunErrors:
        the case fails with that line instead of starting its agent."""
        # deferred: loading fim.run.preflight costs tens of ms
        from fim.run.preflight import agent_problems, workflow_problems

        if suite.agent is not None and suite.agent in self.snapshot.agents:
            agent = self.snapshot.agents[suite.agent]
            return agent_problems(self.snapshot, agent, model=self.model)
        workflow = self.snapshot.workflows.get(suite.workflow or "")
        return workflow_problems(self.snapshot, workflow) if workflow is not None else []

    def _live_model(self, suite: EvalSuite) -> str | None:
        """A real (not scripted) model the suite's target certainly asks: the agent's own, or
        one of a workflow's `llm` nodes or `agent` nodes' agents. In replay without a
        cassette such a case is skipped before it starts, so a workflow's side effects never
        run ahead of a model call that cannot be answered."""
        refs: list[Any] = []
        if suite.agent is not None and suite.agent in self.snapshot.agents:
            refs.append(self.model or self.snapshot.agents[suite.agent].model)
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

    async def _execute(
        self,
        suite: EvalSuite,
        case: EvalCase,
        payload: Any,
        services: Services,
        cassette: Cassette,
        run: CaseRun,
        clock: CaseClock | None = None,
        usage: CaseUsage | None = None,
    ) -> tuple[Observed, str]:
        """Run the case's target on `payload` (`case_payload`: its input, vars filled in);
        a workflow's model calls are counted in `usage` (`fim.eval.case_models`)."""
        if suite.workflow is not None:
            return await self._execute_workflow(suite.workflow, case, payload, services, run, usage)
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
        events: list[Any] = []
        run.trace = events  # kept as it grows: a case that misses shows what ran before
        chosen = None if self.model is None else self._wrap(self.model, cassette, clock)
        async for event in run_agent(
            self.snapshot,
            agent.name,
            conversation,
            services=services,
            hooks=self.hooks_on(suite),
            model=chosen,
        ):
            events.append(event)
            await answer_requests(event, case, services)
            if event.type == "error" and event.kind == "model_error":
                if NEEDS_LIVE in event.message:
                    raise NeedsLiveModel.from_message(event.message)
                if "cassette miss" in event.message:
                    raise CassetteMiss(event.message)
            if isinstance(event, RunFinished):
                final = event
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
        self,
        name: str,
        case: EvalCase,
        payload: Any,
        services: Services,
        run: CaseRun,
        usage: CaseUsage | None = None,
    ) -> tuple[Observed, str]:
        # deferred: loading fim.workflows.engine costs tens of ms
        from fim.workflows.engine import WorkflowEngine

        if not isinstance(payload, dict):
            raise FimError(f"a workflow case needs a mapping of inputs for '{name}'")
        hooks = self.hooks_on(self.snapshot.evals[run.suite])
        engine = WorkflowEngine(self.snapshot, name, services, hooks=hooks)
        events: list[Any] = []
        run.trace = events
        async for event in engine.run(payload):
            events.append(event)
            await answer_requests(event, case, services)
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
        usage = usage or CaseUsage()
        # the calls, the hooks' decisions on them and their results: the trajectory checks'
        seen = [*(e for e in events if e.type in _TRAJECTORY), *usage.calls]
        spent = usage.usage
        return Observed(
            output=text,
            events=seen,
            iterations=len(usage.calls),
            tokens=spent.total_tokens,
            cost=spent.cost,
            structured=outputs,
        ), json.dumps(payload)
