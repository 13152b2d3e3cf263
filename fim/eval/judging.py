"""LLM-as-judge: the prompt a `judge` assertion sends, and how the reply is read.

The judge is asked for `{"verdict": "pass" or "fail", "reason": ...}`. A judge model
someone scripted or prompted for promptfoo's llm-rubric answers `{"pass": true, "reason":
...}` or `{"score": 0.8}`, and those are read too (a score passes at `SCORE_PASSES`, as
promptfoo's rubric threshold does). A reply that says none of it fails, saying what the
judge replied and what was expected: it read as a plain failure with the judge's reason
before (`{"pass": true}` failed as `judge: declines politely`).
"""

from __future__ import annotations

import re
from typing import Any

from fim.config.schema import Assertion, JudgeSpec
from fim.eval.json_checks import json_values
from fim.eval.outcomes import clip
from fim.types import Message, Model

JUDGE_PROMPT = """You grade an AI assistant's answer against a rubric.
Rubric: {rubric}

User request:
{prompt}

Assistant answer:
{output}

Reply with JSON only: {{"verdict": "pass" or "fail", "reason": "<one sentence>"}}"""

EXPECTED = '{"verdict": "pass" or "fail", "reason": "..."}'
"""The reply a judge is asked for, as a failure quotes it."""

SCORE_PASSES = 0.5
"""The score (0 to 1) at or above which a judge's `{"score": ...}` reply passes."""

_WORDS = {"pass": True, "passed": True, "yes": True, "true": True}
_WORDS.update({"fail": False, "failed": False, "no": False, "false": False})


def _said(value: Any) -> bool | None:
    """A verdict or `pass` value as a bool, or None when it says neither."""
    if isinstance(value, bool):
        return value
    return _WORDS.get(value.strip().lower()) if isinstance(value, str) else None


def _score(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
        value = float(value)
    return float(value) if isinstance(value, (int, float)) and 0 <= value <= 1 else None


def verdict(text: str) -> tuple[bool, str]:
    """(passed, reason) of a judge's reply: its first JSON object (the whole reply, a
    fenced block, or one in prose) read for `verdict`, else `pass`, else `score`."""
    reply = next((v for v in json_values(text) if isinstance(v, dict)), None)
    if reply is None:
        return False, f"the judge did not answer in JSON: {clip(text)!r}; expected {EXPECTED}"
    reason = str(reply.get("reason") or reply.get("explanation") or "")
    for key in ("verdict", "pass"):
        if key in reply and _said(reply[key]) is not None:
            return bool(_said(reply[key])), reason
    score = _score(reply.get("score"))
    if score is not None:
        return score >= SCORE_PASSES, reason or f"score {score:g}"
    return False, (
        f"the judge replied {clip(text)!r}, which has no verdict; expected {EXPECTED} "
        f'(or "pass": true/false, or "score": 0 to 1)'
    )


async def model_judge(model: Model, rubric: str, prompt: str, output: str) -> tuple[bool, str]:
    """LLM-as-judge: a verdict and a one-sentence reason (`verdict`)."""
    content = JUDGE_PROMPT.format(rubric=rubric, prompt=prompt, output=output)
    response = await model.complete([Message(role="user", content=content)])
    return verdict((response.message.content or "").strip())


def rubric_of(value: str | JudgeSpec) -> str:
    """A judge's rubric, cut to name it in a line (`'Politely declines and…'`)."""
    rubric = value if isinstance(value, str) else value.rubric
    return clip(rubric, 60)


def judge_model_ref(assertion: Assertion) -> str:
    value = assertion.judge
    return value.model if isinstance(value, JudgeSpec) and isinstance(value.model, str) else "fast"


__all__ = ["JUDGE_PROMPT", "judge_model_ref", "model_judge", "rubric_of", "verdict"]
