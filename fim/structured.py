"""Structured output: a final answer that must be JSON valid against a schema.

One contract serves every place that asks for it: an agent's `output_schema`, a workflow
`llm` or `agent` node's `output_schema`, and the OpenAI endpoint's `response_format`. The
model is told the schema, its final answer is parsed and validated, and on failure it gets
one retry with the validation error; a second failure fails the run (never an unchecked
answer). Validation is `fim.schema_check` for inline schemas and pydantic's own validation
for a pydantic model (`module:Class` in the project's hooks/ folder), so custom validators
hold.

This module imports only the standard library at import time: it sits below the engines.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any, TypeVar

from fim.schema_check import problems as schema_problems

T = TypeVar("T")

_FENCE = re.compile(r"^```(?:json)?\s*(?P<body>.*?)\s*```$", re.DOTALL)

MAX_PROBLEMS = 5


class SchemaError(ValueError):
    """A declared schema that is not a valid JSON Schema (reported by `fim validate`)."""


class NonFinite(ValueError):
    """A NaN or an Infinity where JSON has only numbers; `path` names where (`inputs.amount`,
    "" for the value itself)."""

    def __init__(self, path: str) -> None:
        self.path = path
        where = f"'{path}' is" if path else "the value is"
        super().__init__(f"{where} NaN or Infinity, which is not a JSON number")


def non_finite(value: Any) -> str | None:
    """The dotted path (`items.0.price`) of the first NaN or Infinity in a JSON-shaped value,
    "" when it is the value itself; None when every number is finite.

    Python's JSON parsers (json, pydantic-core, orjson) read `NaN`, `Infinity` and
    overflowing numbers such as `1e400`, none of which JSON has; every comparison with NaN
    is false, so a NaN amount slips past `{{ inputs.amount > 100 }}` into the branch meant
    for small ones. So every value from a client or a model is checked once, where it is
    parsed (an HTTP body, a tool call's arguments, a structured answer) or first typed (a
    workflow input): this is the one check. Iterative, like `nested_deeper`: a deep value
    must not hit the recursion limit here."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ""
    if isinstance(value, Decimal):  # a database's `numeric` (money): NaN and Infinity too
        return None if value.is_finite() else ""
    if type(value) is dict:  # the usual tool call: flat, no float and nothing nested
        for child in value.values():
            kind = type(child)
            if kind is not str and kind is not int and kind is not bool and child is not None:
                break
        else:
            return None
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        pairs: Any
        if isinstance(item, dict):
            pairs = item.items()
        elif isinstance(item, list | tuple):
            pairs = enumerate(item)
        else:
            continue
        for key, child in pairs:
            if isinstance(child, float):
                if not math.isfinite(child):
                    return ".".join(str(part) for part in (*path, key))
            elif isinstance(child, Decimal):
                if not child.is_finite():
                    return ".".join(str(part) for part in (*path, key))
            elif isinstance(child, dict | list | tuple):
                stack.append((child, (*path, key)))
    return None


def finite(value: T) -> T:
    """`value` itself when every number in it is finite, else NonFinite naming where."""
    where = non_finite(value)
    if where is not None:
        raise NonFinite(where)
    return value


def parse_json(text: str) -> Any:
    """The JSON value of a reply; a ```json fence around it (a common habit) is accepted.
    NaN and Infinity are refused (`finite`): a structured answer is sent on as JSON and
    may steer a workflow's conditions."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group("body")
    return finite(json.loads(stripped))


class OutputContract:
    """What the final answer must be: JSON valid against `schema`, or (with `schema` None)
    any JSON object (OpenAI's `json_object` mode). `model` is a pydantic model class that
    validates instead of jsonschema when the schema came from one.

    The engine calls `problem(text)`; None means accepted and `normalize(text)` is the
    answer (compact JSON, fences removed). Otherwise `retry_message(problem)` is what the
    model reads before its one retry.
    """

    def __init__(
        self,
        schema: dict[str, Any] | None = None,
        *,
        model: Any = None,
        name: str = "",
        untrusted: bool = False,
    ) -> None:
        if model is not None and schema is None:
            schema = model.model_json_schema()
        self.schema = schema
        self.model = model
        self.name = name
        self.untrusted = untrusted
        """The schema came from the caller (`response_format`), not the project: checking
        an answer against it runs in a killable worker (`judged`), never on the event loop,
        since a few kilobytes of `anyOf` and `$ref` can take a validator hours."""

    @property
    def schema_text(self) -> str:
        return json.dumps(self.schema, ensure_ascii=False) if self.schema is not None else ""

    def instruction(self) -> str:
        """Appended to the system prompt (or the prompt) so the model knows the shape."""
        if self.schema is None:
            return (
                "When you give your final answer, reply with only a JSON object "
                "(no prose, no code fence)."
            )
        return (
            "When you give your final answer, reply with only a JSON value (no prose, no "
            f"code fence) that validates against this JSON Schema:\n{self.schema_text}"
        )

    def validate(self, text: str) -> tuple[Any, str | None]:
        """(value, None) when `text` is acceptable JSON, else (None, why not)."""
        try:
            value = parse_json(text)
        except ValueError as exc:
            return None, f"the reply was not valid JSON ({exc})"
        if self.model is not None:
            # deferred: loading pydantic_core costs tens of ms
            from pydantic import ValidationError

            try:
                self.model.model_validate(value)
            except ValidationError as exc:
                errors = exc.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]
                parts = [
                    f"{'/'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
                    for e in errors
                ]
                return None, "the JSON does not match the schema: " + "; ".join(parts)
            return value, None
        if self.schema is None:
            if not isinstance(value, dict):
                return None, "the reply must be a JSON object"
            return value, None

        problems = schema_problems(value, self.schema, MAX_PROBLEMS)
        if problems:
            return None, "the JSON does not match the schema: " + "; ".join(problems)
        return value, None

    def problem(self, text: str) -> str | None:
        return self.validate(text)[1]

    def normalize(self, text: str) -> str:
        value, problem = self.validate(text)
        if problem is not None:
            raise ValueError(problem)
        return json.dumps(value, ensure_ascii=False)

    def retry_message(self, problem: str) -> str:
        target = f"matching the schema {self.schema_text}" if self.schema is not None else "object"
        return f"Error: {problem}. Reply again with only the corrected JSON {target}."


def judged(schema: dict[str, Any] | None, text: str) -> str:
    """`OutputContract(schema)`'s verdict on `text`, as the JSON `[answer, problem]` (the
    normalized answer or None, the problem or None): run in a worker process for an
    untrusted schema (`fim.tools.isolate`, which kills it past its deadline)."""
    contract = OutputContract(schema)
    value, problem = contract.validate(text)
    answer = None if problem is not None else json.dumps(value, ensure_ascii=False)
    return json.dumps([answer, problem])
