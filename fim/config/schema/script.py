"""A scripted model's file (`model: scripted:evals/x.script.yaml`) in the form that picks
its steps by the conversation: `replies`, each a `when` and its `steps`, and a `default`.

The plain form (a list of steps, or `{steps: [...]}`) replays the same steps whatever the
prompt; it is read by `fim.llm.script` as it always was. These models are the schema of the
new form (`script_json_schema` gives the JSON Schema of both), and `fim.config.script_files`
validates a file with them so `fim validate` and the run report the same problems.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, TypeAdapter, field_validator, model_validator

from fim.config.schema.base import Strict, empty_list
from fim.schema_check import pattern_matches

REGEX_PREFIX = "regex:"
"""A `when` pattern that starts with this is a regex (RE2 syntax) searched in the text; any
other pattern is a substring, matched case-sensitively (as the `contains` assertion)."""


class ScriptToolCall(Strict):
    """One call a step asks for: `{name: calculator, arguments: {expression: 6*7}}`."""

    name: str
    """The tool's name, as `fim run -v` shows it."""
    arguments: dict[str, Any] | str | None = None
    """The call's arguments; a string is sent verbatim (malformed JSON on purpose)."""
    id: str | None = None
    """The call's id (default: a fresh one)."""


class ScriptStep(Strict):
    """What the model answers to one call: a `text` reply or `tool_calls` (with `text`)."""

    text: str | None = None
    """A text reply (with `tool_calls`: the text sent alongside them)."""
    tool_calls: list[ScriptToolCall] | None = None
    """Tool calls made in this one turn."""
    tool_call: ScriptToolCall | None = None
    """One tool call (short for a `tool_calls` list of one)."""


Steps = list[str | ScriptStep]
"""Steps served one per model call; a plain string is a text reply."""


def _steps_problem(steps: Steps, owner: str) -> str | None:
    """Why a list of steps cannot serve: empty, or a step that says nothing. Checked by the
    model that holds the list (a validator on a union member renames it in pydantic's
    error locations, and the problem then points at no key)."""
    if not steps:
        return f"{owner} has no steps: give at least one (`- text: ...`)"
    for i, step in enumerate(steps):
        if isinstance(step, ScriptStep) and not (step.text or step.tool_calls or step.tool_call):
            return f"step {i + 1} says nothing: a step is `text: ...` or `tool_calls: [...]`"
    return None


def _pattern_problem(pattern: str) -> str | None:
    """Why a `when` pattern cannot be used: empty, a `regex:` that does not compile, or one
    RE2 cannot run. A `when` is searched in text a caller typed (or a tool fetched), on the
    server's event loop: RE2 takes time linear in it, where Python's `re` backtracks
    (`^(?!.*cancel)(\\w+\\s*)+\\?$` held `fim serve` 4.7 s on 26 characters)."""
    if not pattern.strip():
        return "an empty pattern matches every message; leave `when` out and use `default`"
    if pattern.startswith(REGEX_PREFIX):
        source = pattern.removeprefix(REGEX_PREFIX)
        try:
            re.compile(source)
        except re.error as exc:
            return f"bad regex {source!r}: {exc}"
        if pattern_matches(source, "") is None:
            return (
                f"regex `{source}` cannot run on RE2, which matches `when` patterns "
                "(lookarounds and backreferences are not supported; to leave out messages "
                "that say something, put a reply whose `when` matches them first: the first "
                "match wins)"
            )
    return None


class ReplyCondition(Strict):
    """What a reply is for; every pattern given must match."""

    user: str | None = None
    """A substring (or `regex:...`) of the latest user message."""
    tool_result: str | None = None
    """A substring (or `regex:...`) of the latest tool result after that user message."""

    @field_validator("user", "tool_result")
    @classmethod
    def _usable(cls, value: str | None) -> str | None:
        problem = _pattern_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value


class ScriptReply(Strict):
    """Steps served while `when` matches the conversation (the first matching reply wins)."""

    when: str | ReplyCondition
    """A substring of the latest user message (`refund`), a `regex:` on it
    (`regex:(?i)\\brefund\\b`), or `{user: ..., tool_result: ...}`."""
    steps: Steps
    """The steps of this reply, one per model call, in order."""

    @field_validator("when")
    @classmethod
    def _usable(cls, value: str | ReplyCondition) -> str | ReplyCondition:
        if isinstance(value, str):
            problem = _pattern_problem(value)
        elif value.user is None and value.tool_result is None:
            problem = "`when` needs `user`, `tool_result` or both"
        else:
            problem = None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("steps")
    @classmethod
    def _serves(cls, value: Steps) -> Steps:
        problem = _steps_problem(value, "this `when`")
        if problem is not None:
            raise ValueError(problem)
        return value


class ScriptFile(Strict):
    """A scripted model whose steps are chosen by the conversation, not replayed in order."""

    replies: list[ScriptReply] = Field(default_factory=empty_list)
    """Replies in order; on each model call the first whose `when` matches serves its next
    step (none: every call is served `default`, as a judge script often is)."""
    default: Steps = Field(default_factory=empty_list)
    """Steps served when no reply matches (none: such a call is an error)."""

    @model_validator(mode="after")
    def _answers(self) -> ScriptFile:
        if not self.replies and not self.default:
            raise ValueError(
                "a scripted model file needs `replies` or `default` (steps served to every "
                "call no reply matches)"
            )
        return self

    @field_validator("default")
    @classmethod
    def _serves(cls, value: Steps) -> Steps:
        problem = _steps_problem(value, "`default`") if value else None
        if problem is not None:
            raise ValueError(problem)
        return value


class StepsFile(Strict):
    """The plain form as a mapping: the same steps whatever the prompt."""

    steps: Steps
    """Steps served one per model call, in order."""


def script_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scripted model file: a list of steps, `{steps}`, or
    `{replies, default}`."""
    adapter: TypeAdapter[Any] = TypeAdapter(Steps | StepsFile | ScriptFile)
    schema = adapter.json_schema()
    schema.setdefault("title", "Scripted model file")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
