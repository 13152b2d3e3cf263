"""The DAG engine (`engine: dag`): plan the goal into steps, run independent steps in
parallel as ReAct sub-runs, check the result, re-plan if needed, then synthesise.

Each step is a full ReAct run with the agent's tools *and hooks*, so planning never opens a
way around a guard. An invalid plan is retried once with the validation error; a second
invalid plan falls back to plain ReAct with an event saying so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fim.engines.call_content import CallContent
from fim.engines.dag_plan import (
    ANALYZER,
    PLANNER,
    SYNTHESIS,
    Plan,
    PlanStep,
    Verdict,
    json_object,
    results_text,
)
from fim.engines.react import ReactEngine
from fim.errors import FimError
from fim.events import (
    ErrorEvent,
    Event,
    LLMCall,
    MessageEvent,
    Notice,
    PlanCreated,
    RunFinished,
    RunStarted,
    RunStatus,
    StepFinished,
    StepStarted,
    Token,
)
from fim.types import Message, ModelResponse, TextDelta, Usage


@dataclass
class DagEngine:
    base: ReactEngine
    """A configured ReAct engine: its model, tools, hooks and prompt serve every step."""
    max_replans: int = 3
    trace_id: str | None = None
    """The run's trace id when it is traced (see `ReactEngine.trace_id`)."""

    async def run(self, input: str | list[Message]) -> AsyncIterator[Event]:
        base = self.base
        started = time.perf_counter()
        goal = (
            input
            if isinstance(input, str)
            else next((m.content or "" for m in reversed(input) if m.role == "user"), "")
        )
        yield RunStarted(
            run_id=base.run_id,
            agent=base.agent,
            input=base.mask(goal),
            snapshot_version=base.snapshot_version,
            engine="dag",
            trace_id=self.trace_id,
        )
        self._usage = Usage()
        self._calls = 0
        results: dict[str, tuple[str, str]] = {}
        feedback = ""
        try:
            for round_no in range(1, self.max_replans + 2):
                plan = None
                async for event in self._plan(goal, results, feedback, round_no):
                    if isinstance(event, Plan):
                        plan = event
                    else:
                        yield event
                if plan is None:
                    if round_no > 1:
                        break  # keep what earlier rounds achieved
                    yield Notice(
                        run_id=base.run_id,
                        message="the planner returned no valid "
                        "plan twice; falling back to the ReAct engine",
                        data={"fallback": "react"},
                    )
                    async for event in self._fallback(input):
                        yield event
                    return
                prefix = "" if round_no == 1 else f"r{round_no}."
                async for event in self._execute(goal, plan, prefix, results):
                    yield event
                if round_no > self.max_replans:
                    break
                verdict = await self._analyze(goal, results)
                yield self._llm_event(round_no)
                if verdict.done:
                    break
                feedback = f"{verdict.reason} Missing: {verdict.missing}".strip()
                yield Notice(
                    run_id=base.run_id,
                    message=f"re-planning: {feedback}",
                    data={"replan": round_no + 1},
                )
            answer = ""
            async for piece in self._synthesize(goal, results):
                if isinstance(piece, str):
                    answer = piece
                else:
                    yield piece
        except FimError as exc:
            made: ModelResponse | None = getattr(exc, "response", None)
            if made is not None:  # made and paid for, then over a budget: it is reported
                self._took(made)
                yield self._llm_event(self._calls)
            kind = getattr(exc, "kind", "model_error")  # budget_exceeded (fim.run.spend)
            yield ErrorEvent(run_id=base.run_id, message=base.mask(str(exc)), kind=kind)
            output = str(exc) if kind == "budget_exceeded" else f"Model error: {exc}"
            yield self._finish(output, "error", started)
            return
        yield MessageEvent(run_id=base.run_id, content=base.mask(answer))
        yield self._finish(answer, "ok", started)

    # ------------------------------------------------------------------ phases

    async def _complete(self, messages: list[Message]) -> ModelResponse:
        self._t0, self._sent = time.perf_counter(), messages
        return self._took(await self.base.model.complete(messages, None))

    def _took(self, response: ModelResponse) -> ModelResponse:
        """A call of the planner, analyzer or synthesis answered: it counts in the run."""
        self._usage = self._usage + response.usage
        self._calls += 1
        self._last = response
        return response

    def _llm_event(self, iteration: int) -> LLMCall:
        """The event of the planner's, analyzer's or synthesis' last call, with what it sent
        and got back when the run keeps content (as a step's calls do: `ReactEngine`)."""
        base, last = self.base, self._last
        request = answer = None
        if base.capture:  # each of these calls is a conversation of its own: kept whole
            content = CallContent(base.mask)
            request, answer = content.request(self._sent, (), iteration), content.response(last)
        return LLMCall(
            run_id=base.run_id,
            model=last.model or base.model.name,
            iteration=iteration,
            usage=last.usage,
            duration_ms=(time.perf_counter() - self._t0) * 1000,
            request_model=getattr(base.model, "name", ""),
            provider=getattr(base.model, "provider", "") or "",
            finish_reason=last.finish_reason,
            request=request,
            response=answer,
        )

    async def _plan(
        self, goal: str, results: dict[str, tuple[str, str]], feedback: str, round_no: int
    ) -> AsyncIterator[Any]:
        tools = "\n".join(f"- {t.name}: {t.description[:100]}" for t in self.base.registry) or (
            "- (no tools: steps are answered from knowledge)"
        )
        user = f"Goal: {goal}"
        if results:
            user += f"\n\nAlready done:\n{results_text(results)}\n\nWhat is missing: {feedback}"
            user += "\nPlan only the remaining work."
        messages = [
            Message(role="system", content=PLANNER.format(tools=tools)),
            Message(role="user", content=user),
        ]
        for attempt in (1, 2):
            response = await self._complete(messages)
            yield self._llm_event(round_no)
            text = response.message.content or ""
            try:
                plan = Plan.model_validate(json_object(text))
            except (ValueError, ValidationError) as exc:
                if attempt == 2:
                    return
                if isinstance(exc, ValidationError):
                    problem = "; ".join(
                        f"{'.'.join(map(str, e['loc'])) or 'plan'}: {e['msg']}"
                        for e in exc.errors()
                    )
                else:
                    problem = str(exc)
                messages = [
                    *messages,
                    Message(role="assistant", content=text),
                    Message(
                        role="user",
                        content=f"That plan is invalid: {problem}. "
                        "Reply with the corrected JSON only.",
                    ),
                ]
                continue
            yield PlanCreated(
                run_id=self.base.run_id,
                round=round_no,
                steps=[s.model_dump() for s in plan.steps],
                reason=feedback,
            )
            yield plan
            return

    async def _execute(
        self, goal: str, plan: Plan, prefix: str, results: dict[str, tuple[str, str]]
    ) -> AsyncIterator[Event]:
        """Run steps as soon as their dependencies are done; independent ones concurrently."""
        queue: asyncio.Queue[Event | str] = asyncio.Queue()
        pending = {s.id: s for s in plan.steps}
        running: dict[str, asyncio.Task[None]] = {}
        done: set[str] = set()

        async def step_run(step: PlanStep) -> None:
            try:
                await self._run_step(goal, step, prefix, results, queue)
            finally:
                await queue.put(step.id)  # after all of its events: its end, read in order

        def launch() -> None:
            for sid, step in list(pending.items()):
                if set(step.depends_on) <= done:
                    del pending[sid]
                    running[sid] = asyncio.create_task(step_run(step))

        launch()
        try:
            while running:
                event = await queue.get()
                if isinstance(event, str):  # this step's end: every event it made was read
                    await running.pop(event)  # (a step that finished without it being read
                    done.add(event)  # left its events in the queue: attack66 follow-up)
                    launch()
                else:
                    yield event
        finally:
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)

    async def _run_step(
        self,
        goal: str,
        step: PlanStep,
        prefix: str,
        results: dict[str, tuple[str, str]],
        queue: asyncio.Queue[Event | str],
    ) -> None:
        base = self.base
        sid = prefix + step.id
        deps = {prefix + d: results[prefix + d] for d in step.depends_on if prefix + d in results}
        context = (
            f"\n\nYou are carrying out one step of a plan.\nOverall goal: {goal}\n"
            f"Your step ({sid}): {step.task}\n"
            f"Results of earlier steps:\n{results_text(deps)}\n"
            "Do only this step and reply with its result."
        )
        engine = dataclasses.replace(
            base,
            system_prompt=base.system_prompt + context,
            run_id=base.run_id,
            stream=False,
            metadata={**base.metadata, "step": sid},  # binds a hook's approval to this step
            transcript=[],  # a step's own: parallel steps shared the list hooks read
            views={},  # and the call views, keyed by call ids steps may repeat
        )
        t0 = time.perf_counter()
        await queue.put(StepStarted(run_id=base.run_id, step=sid, task=step.task))
        output = ""
        status: RunStatus = "error"
        async for event in engine.run(step.task):
            if isinstance(event, RunFinished):
                output, status = event.output, event.status
                self._usage = self._usage + event.usage
                self._calls += event.iterations
            elif not isinstance(event, RunStarted):
                await queue.put(event)
        results[sid] = (step.task, output)
        await queue.put(
            StepFinished(
                run_id=base.run_id,
                step=sid,
                output=output,
                status=status,
                duration_ms=(time.perf_counter() - t0) * 1000,
            )
        )

    async def _analyze(self, goal: str, results: dict[str, tuple[str, str]]) -> Verdict:
        response = await self._complete(
            [
                Message(role="system", content=ANALYZER),
                Message(role="user", content=f"Goal: {goal}\n\nResults:\n{results_text(results)}"),
            ]
        )
        try:
            return Verdict.model_validate(json_object(response.message.content or ""))
        except (ValueError, ValidationError):
            return Verdict(done=True, reason="the analyzer's reply was not JSON; stopping")

    async def _synthesize(
        self, goal: str, results: dict[str, tuple[str, str]]
    ) -> AsyncIterator[Any]:
        base = self.base
        messages = [
            Message(role="system", content=base.system_prompt or "You are helpful."),
            Message(
                role="user", content=SYNTHESIS.format(goal=goal, results=results_text(results))
            ),
        ]
        self._t0, self._sent = time.perf_counter(), messages
        if base.stream:
            response = None
            # closed with the run: a budget counts a stream cut off when it is
            async with aclosing(base.model.stream(messages, None)) as stream:  # type: ignore[type-var]
                async for chunk in stream:
                    if isinstance(chunk, TextDelta):
                        yield Token(run_id=base.run_id, text=base.mask(chunk.text))
                    else:
                        response = chunk
            if response is None:
                raise FimError("the model stream ended without a final response")
            self._took(response)
        else:
            response = await self._complete(messages)
        yield self._llm_event(self._calls)
        yield (response.message.content or "").strip()

    async def _fallback(self, input: str | list[Message]) -> AsyncIterator[Event]:
        async for event in self.base.run(input):
            if isinstance(event, RunStarted):
                continue
            if isinstance(event, RunFinished):
                event = event.model_copy(
                    update={
                        "usage": self._usage + event.usage,
                        "iterations": self._calls + event.iterations,
                    }
                )
            yield event

    def _finish(self, output: str, status: RunStatus, started: float) -> RunFinished:
        return RunFinished(
            run_id=self.base.run_id,
            output=self.base.mask(output),
            status=status,
            usage=self._usage,
            iterations=self._calls,
            duration_ms=(time.perf_counter() - started) * 1000,
        )
