"""What the dag engine asks its model and how it reads the answers: the planner's,
analyzer's and synthesis prompts, and the plan and verdict models their JSON must fit.
Kept apart from `fim.engines.dag`, the engine, so the prompts read on their own."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator


class PlanStep(BaseModel):
    id: str = Field(min_length=1, max_length=40)
    task: str = Field(min_length=1)
    depends_on: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    """A plan as the model must write it; validation errors are fed back to the model."""

    steps: list[PlanStep] = Field(min_length=2, max_length=6)

    @field_validator("steps")
    @classmethod
    def _unique(cls, steps: list[PlanStep]) -> list[PlanStep]:
        ids = [s.id for s in steps]
        if len(set(ids)) != len(ids):
            raise ValueError("step ids must be unique")
        return steps

    @model_validator(mode="after")
    def _acyclic(self) -> Plan:
        known = {s.id for s in self.steps}
        for step in self.steps:
            unknown = [d for d in step.depends_on if d not in known]
            if unknown:
                raise ValueError(f"step {step.id} depends on unknown steps {unknown}")
        done: set[str] = set()
        remaining = list(self.steps)
        while remaining:
            ready = [s for s in remaining if set(s.depends_on) <= done]
            if not ready:
                raise ValueError("the dependencies form a cycle")
            done |= {s.id for s in ready}
            remaining = [s for s in remaining if s.id not in done]
        return self


class Verdict(BaseModel):
    done: bool = True
    reason: str = ""
    missing: str = ""


PLANNER = """You are the planner of an agent. Break the user's goal into 2 to 6 steps.
Each step is a self-contained task another worker can do with these tools:
{tools}
Steps that do not depend on each other run in parallel, so only add a dependency when a
step needs another step's result.
Reply with JSON only, no prose:
{{"steps": [{{"id": "s1", "task": "...", "depends_on": []}}, ...]}}"""

ANALYZER = """You check whether the results of a plan achieve the user's goal.
Reply with JSON only: {"done": true or false, "reason": "<one sentence>",
"missing": "<what is still needed, if not done>"}"""

SYNTHESIS = """Goal: {goal}

Results of the steps that were carried out:
{results}

Write the final answer to the goal for the user, using these results."""


def json_object(text: str) -> Any:
    match = re.search(r"\{.*\}", text or "", re.S)
    if match is None:
        raise ValueError("no JSON object in the reply")
    return json.loads(match.group(0))


def results_text(results: dict[str, tuple[str, str]]) -> str:
    return "\n".join(f"- {sid} ({task}): {out}" for sid, (task, out) in results.items()) or "none"
