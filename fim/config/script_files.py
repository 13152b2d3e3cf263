"""Reading a scripted model's file, in either form, with every problem at its
`file:line:col`: the plain form (a list of steps, or `{steps: [...]}`, what `fim init`
writes) and the form that picks steps by the conversation (`replies:` and `default:`,
`fim.config.schema.script`).

It sits with the config readers, under the model layer, so `fim validate` (through
`fim.build.model_checks`) and `fim.llm.script` at run time read the file with the same
code and say the same thing about it: a typo such as `tool_cals:` is reported by
`fim validate`, not first by the run.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fim.config.problems import suggest, validation_problems
from fim.config.yamlio import Document, Path_, YamlSyntaxError, parse
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.schema.script import ScriptFile


def is_branching(data: Any) -> bool:
    """Whether parsed script data is the `replies` form (any mapping without `steps`: a
    misspelt `replies` must be reported as such, not read as a list of steps)."""
    return isinstance(data, dict) and ("steps" not in data or "replies" in data)


STEP_KEYS = frozenset({"text", "tool_calls", "tool_call"})
"""The keys of a plain step."""

_STEP_HINT = "each step is `- text: ...` or `- tool_calls: [{name: ..., arguments: {...}}]`"


def read_script(text: str, path: str) -> tuple[ScriptFile | list[Any] | None, list[Problem]]:
    """What `text` holds, and its problems, each pointing into `path`: the `replies` form
    as a `ScriptFile`, or the plain form's steps (each a string or a mapping of
    `STEP_KEYS`, checked: `fim.llm.script` builds them as they are). None when there is
    a problem."""
    try:
        doc = parse(text, path)
    except YamlSyntaxError as exc:
        problem = Problem(path, exc.line, exc.column, f"invalid YAML: {exc.message}", exc.hint)
        return None, [problem]
    if doc.problems:
        return None, list(doc.problems)
    if not is_branching(doc.data):
        steps, problems = _plain_steps(doc)
        return (None if problems else steps), problems
    if "steps" in doc.data:
        problem = doc.problem(
            ("steps",),
            "`steps` and `replies` cannot be used together",
            "`replies` picks steps by the prompt; put the steps every prompt gets in `default`",
            key=True,
        )
        return None, [problem]
    # deferred: the `replies` models are built only for a file that uses them
    from fim.config.schema.script import ScriptFile

    try:
        return ScriptFile.model_validate(doc.data), []
    except ValidationError as exc:
        return None, validation_problems(exc, ScriptFile, doc)


def _plain_steps(doc: Document) -> tuple[list[Any], list[Problem]]:
    """The plain form's steps (a list, or the list under `steps:`) and every problem of
    them at once, each at its step or call."""
    data, at = doc.data, tuple[str, ...]()
    problems: list[Problem] = []
    if isinstance(data, dict):
        for key in (str(k) for k in data if k != "steps"):
            hint = suggest(key, ("steps",), "keys")
            problems.append(doc.problem((key,), f"unknown key '{key}'", hint, key=True))
        data, at = data["steps"], ("steps",)
    if not isinstance(data, list):
        message = "a scripted model file must be a list of steps"
        return [], [*problems, doc.problem(at, message, "start with `- text: Hi`")]
    for i, item in enumerate(data):
        problems += _step_problems(doc, (*at, i), item)
    return data, problems


def _step_problems(doc: Document, at: Path_, item: Any) -> list[Problem]:
    """Why one plain step cannot serve: a string is a text reply; a mapping is `text`,
    `tool_calls`/`tool_call` (with `text` sent alongside), each call with a `name`."""
    if isinstance(item, str):
        return []
    if not isinstance(item, dict):
        return [doc.problem(at, "a script step must be a mapping", _STEP_HINT)]
    keys = set(item)
    unknown = sorted(str(k) for k in keys - STEP_KEYS)
    if unknown:
        guess = suggest(unknown[0], STEP_KEYS, "step keys") if len(unknown) == 1 else None
        listed = ", ".join(f"'{k}'" for k in unknown)
        spot = (*at, unknown[0]) if len(unknown) == 1 else at
        problem = doc.problem(spot, f"unknown step key {listed}", guess or _STEP_HINT, key=True)
        return [problem]
    if not keys or (keys == {"text"} and item["text"] is None):
        return [doc.problem(at, "a step says nothing", _STEP_HINT)]
    if not keys & {"tool_calls", "tool_call"}:
        return []
    if item.get("tool_calls") == [] and "tool_call" not in keys:
        where = (*at, "tool_calls")
        return [doc.problem(where, "`tool_calls` is empty", "list the calls, or write `text:`")]
    if item.get("tool_calls"):  # as the run reads it: `tool_calls`, else `tool_call`
        raw, where = item["tool_calls"], (*at, "tool_calls")
        if not isinstance(raw, list):
            return [doc.problem(where, "`tool_calls` must be a list of calls", _STEP_HINT)]
        calls = [((*where, j), call) for j, call in enumerate(raw)]
    else:
        calls = [((*at, "tool_call"), item.get("tool_call"))]
    problems: list[Problem] = []
    for spot, call in calls:
        if not isinstance(call, dict) or "name" not in call:
            given = [str(k) for k in call] if isinstance(call, dict) else []
            close = difflib.get_close_matches("name", given, n=1, cutoff=0.6)
            hint = f"the call has '{close[0]}': did you mean 'name'?" if close else _STEP_HINT
            problems.append(doc.problem(spot, "a tool call needs a `name`", hint))
        elif call.get("arguments") is not None and not isinstance(call["arguments"], dict | str):
            message = "tool call `arguments` must be a mapping"
            problems.append(doc.problem((*spot, "arguments"), message, _STEP_HINT))
    return problems
