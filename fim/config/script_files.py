"""Reading a scripted model's file in the form that picks steps by the conversation
(`replies:` and `default:`, `fim.config.schema.script`), with every problem at its
`file:line:col`.

It sits with the config readers, under the model layer, so `fim validate` (through
`fim.build.model_checks`) and `fim.llm.script` at run time read the file with the same
code and say the same thing about it. The plain form (a list of steps, or `{steps: [...]}`)
is left to `fim.llm.script`, which has always read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fim.config.problems import validation_problems
from fim.config.yamlio import YamlSyntaxError, parse
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.schema.script import ScriptFile


def is_branching(data: Any) -> bool:
    """Whether parsed script data is the `replies` form (any mapping without `steps`: a
    misspelt `replies` must be reported as such, not read as a list of steps)."""
    return isinstance(data, dict) and ("steps" not in data or "replies" in data)


def read_script(text: str, path: str) -> tuple[ScriptFile | None, list[Problem]]:
    """The `replies` form in `text` (None when the file is in the plain form, or broken),
    and its problems, each pointing into `path`."""
    try:
        doc = parse(text, path)
    except YamlSyntaxError as exc:
        return None, [Problem(path, exc.line, exc.column, f"invalid YAML: {exc.message}")]
    if doc.problems:
        return None, list(doc.problems)
    if not is_branching(doc.data):
        return None, []
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
