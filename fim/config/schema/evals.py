"""evals/*.yaml: suites of cases with assertions on the output and the trace."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from fim.config import promptfoo_words
from fim.config.schema.base import JSONSchema, Strict, empty_list
from fim.config.schema.eval_answers import ApprovalAnswers as ApprovalAnswers
from fim.config.schema.eval_answers import ElicitationAnswer as ElicitationAnswer
from fim.config.schema.eval_trajectory import HooksSwitch, listed_calls, named_call
from fim.config.schema.eval_trajectory import ToolCalledSpec as ToolCalledSpec
from fim.config.schema.eval_trajectory import ToolSequenceSpec as ToolSequenceSpec
from fim.config.schema.project import ModelRef
from fim.config.schema.suite_rules import one_target, written_cases
from fim.schema_check import pattern_matches


class JsonPathSpec(Strict):
    path: str
    """JSONPath into the output parsed as JSON (workflow outputs as they are), e.g. `$.result`."""
    equals: Any
    """Expected value there (a mapping: these keys at least)."""


class JudgeSpec(Strict):
    rubric: str
    """What a passing answer does; the judge model answers pass or fail with a reason."""
    model: ModelRef = "fast"
    """Model role or settings of the judge."""


PYTHON_REF = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
"""`module:function`: a function of a file in the project's hooks folder."""


class PythonSpec(Strict):
    """A project function that checks the output: `{function: checks:polite, threshold}`."""

    function: Annotated[str, Field(json_schema_extra={"pattern": PYTHON_REF})]
    """`module:function` in the hooks folder (`checks:polite` is `polite` in
    hooks/checks.py), called as `function(output, context)`; it returns a bool, a score,
    or `(bool, reason)`."""
    threshold: float = 0.5
    """The score at or above which a returned number passes."""

    @field_validator("function")
    @classmethod
    def _a_ref(cls, ref: str) -> str:
        if re.match(PYTHON_REF, ref) is None:
            raise ValueError(
                f"'{ref}' is not module:function (`checks:polite` is the function polite "
                "in hooks/checks.py)"
            )
        return ref


def _python_ref(value: Any) -> Any:
    """`python: checks:polite` is `{function: checks:polite}` (and a CSV cell's form)."""
    return {"function": value} if isinstance(value, str) else value


def _only_true(value: Any) -> Any:
    """`is_json` takes `true`: a schema, or `false`, is said in fim's words."""
    if isinstance(value, dict):
        raise PydanticCustomError(
            "is_json_schema",
            "is_json takes true",
            {"hint": "a JSON Schema the output must meet goes in `json_schema: {...}`"},
        )
    if value is False:
        raise PydanticCustomError(
            "is_json_false", "is_json takes true", {"hint": "write `not: {is_json: true}`"}
        )
    return value


class Negatable(Strict):
    """A check of the output that `not:` can turn around; set exactly one key."""

    equals: str | None = None
    """The output equals this text, surrounding whitespace ignored."""
    contains: str | None = None
    """The output contains this text."""
    icontains: str | None = None
    """The output contains this text, in any case."""
    contains_any: list[str] | None = Field(default=None, min_length=1)
    """The output contains at least one of these texts (promptfoo's `contains-any`)."""
    contains_all: list[str] | None = Field(default=None, min_length=1)
    """The output contains every one of these texts (promptfoo's `contains-all`)."""
    icontains_any: list[str] | None = Field(default=None, min_length=1)
    """The output contains at least one of these texts, in any case."""
    icontains_all: list[str] | None = Field(default=None, min_length=1)
    """The output contains every one of these texts, in any case."""
    starts_with: str | None = None
    """The output starts with this text, leading whitespace of the output ignored (as
    `equals` ignores it: a model's reply often opens with a newline)."""
    regex: str | None = None
    """A Python regex that matches somewhere in the output."""
    is_json: Annotated[Literal[True] | None, BeforeValidator(_only_true)] = None
    """`true`: the whole output is JSON (promptfoo's `is-json`; a schema it must meet goes
    in `json_schema`)."""
    contains_json: Literal[True] | JSONSchema | None = None
    """The output holds a JSON object or array somewhere, in prose or a ```json fence
    (promptfoo's `contains-json`): `true`, or a JSON Schema one of them must meet."""
    json_schema: JSONSchema | None = None
    """The output's JSON is valid against this JSON Schema: the whole output, else its
    first ```json fence, else its first JSON object or array. `{}` alone is `is_json: true`."""
    json_path: JsonPathSpec | None = None
    """A value at a JSONPath of the output's JSON (found as `json_schema` finds it):
    `{path, equals}`."""

    @model_validator(mode="before")
    @classmethod
    def _promptfoo_form(cls, data: Any) -> Any:
        """`{type: icontains, value: billing}`: one problem saying how fim writes it, not
        an unknown key per `type`, `value` and `threshold`."""
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            message, hint = promptfoo_words.typed_form(data, NEGATABLE)
            raise PydanticCustomError("promptfoo_form", message, {"hint": hint})
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> Negatable:
        fields = type(self).model_fields
        set_keys = [info.alias or k for k, info in fields.items() if getattr(self, k) is not None]
        if len(set_keys) != 1:
            raise ValueError(
                "an assertion needs exactly one key such as 'contains' or 'tool_called'"
                + (f", got {', '.join(set_keys)}" if set_keys else "")
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in type(self).model_fields if getattr(self, k) is not None)

    @classmethod
    def unknown_key_hint(cls, key: str, value: Any) -> str | None:
        """What to write instead of a key `not:` does not take: the check's own opposite
        where fim has one, and promptfoo's words in fim's spelling."""
        if key in _NOT_NEGATABLE:
            return _NOT_NEGATABLE[key].format(value=promptfoo_words.shown(value))
        return promptfoo_words.unknown_check(key, value, NEGATABLE)


NEGATABLE = frozenset(Negatable.model_fields)
"""The checks `not:` takes."""

_NOT_NEGATABLE = {
    "not_contains": "write `contains: {value}`",
    "not": "write the check itself, not its double negation",
    "tool_called": "write `tool_not_called: NAME`, or `tool_called: {{name, args, times: 0}}`",
    "tool_not_called": "write `tool_called: {value}`",
    "tool_blocked": "write `tool_called: {{name: {value}, blocked: false}}`",
    "judge": "write the negation into the rubric: `judge: Does not ...`",
    "python": "let the function return the opposite",
}
"""Checks of an `Assertion` that `not:` does not take, and how to say their opposite."""


class Assertion(Negatable):
    """One expectation; set exactly one key."""

    not_contains: str | None = None
    """The output does not contain this text."""
    not_: Negatable | None = Field(default=None, alias="not")
    """The opposite of a check of the output: `not: {regex: sorry}` passes when the check
    fails (promptfoo's `not-` prefix: `not-icontains`, `not-is-json`, ...). A check that
    could not be told (a regex neither RE2 nor Python can run) fails, negated or not."""
    tool_called: Annotated[
        ToolCalledSpec | None,
        BeforeValidator(named_call, json_schema_input_type=str | ToolCalledSpec | None),
    ] = None
    """A call to a tool, with these arguments at least: `{name, args, times, blocked}`, or
    just its name (`tool_called: save_note`, as a CSV cell writes it)."""
    tool_not_called: str | None = None
    """No call to this tool: a call a hook blocked counts (the model made it), and the
    failure says which hook blocked it; `tool_blocked` asserts the guard held."""
    tool_blocked: str | None = None
    """A call to this tool that a PreToolUse hook blocked (it never ran): the guard held.
    Needs the suite's hooks on (`hooks: on`, or `fim eval --with-hooks`)."""
    tool_sequence: Annotated[
        ToolSequenceSpec | None,
        BeforeValidator(listed_calls, json_schema_input_type=list[Any] | ToolSequenceSpec | None),
    ] = None
    """Tool calls in this order: a list of names (others between allowed), or `{tools,
    mode}` / `{calls: [{name, args}], mode}`, `mode` being `in_order` (default), `exact`
    (only these calls) or `any_order` (each of these, in any order)."""
    max_iterations: int | None = None
    """At most this many model calls."""
    max_tokens: int | None = None
    """At most this many tokens in all."""
    max_cost: float | None = None
    """At most this many dollars; an unknown price fails the check (set `price:` on the model)."""
    latency_ms: float | None = None
    """The run took at most this many milliseconds."""
    judge: str | JudgeSpec | None = None
    """LLM-as-judge: a rubric, or `{rubric, model}` (default model: the `fast` role). The
    judge answers `{"verdict": "pass" or "fail", "reason": ...}`; `{"pass": true}` and a
    `{"score": 0..1}` (passing at 0.5) are read too."""
    python: Annotated[
        PythonSpec | None,
        BeforeValidator(_python_ref, json_schema_input_type=str | PythonSpec | None),
    ] = None
    """A project function decides (promptfoo's `python:`): `module:function` in the hooks
    folder, called with the output and the case's context (`prompt`, `vars`, `tool_calls`,
    ...); a bool, a score (passing at `threshold`, default 0.5) or `(bool, reason)`."""

    @field_validator("not_")
    @classmethod
    def _checkable(cls, inner: Negatable | None) -> Negatable | None:
        """The regex or JSONPath under `not:` is checked here, as `fim validate` checks a
        plain one (`fim.build.checks`): a check that cannot run must not pass as negated."""
        if inner is not None and inner.regex is not None:
            problem = regex_problem(inner.regex)
            if problem is not None:
                raise ValueError(problem)
        if inner is not None and inner.json_path is not None:
            # deferred: loading fim.json_paths costs tens of ms
            from fim.json_paths import check

            problem = check(inner.json_path.path)
            if problem is not None:
                raise ValueError(f"json_path: {problem}")
        return inner

    @property
    def kind(self) -> str:
        """The check's name in reports: `not_regex` for `not: {regex: ...}` (as
        `not_contains` is the opposite of `contains`)."""
        return f"not_{self.not_.kind}" if self.not_ is not None else super().kind

    @classmethod
    def unknown_key_hint(cls, key: str, value: Any) -> str | None:
        return promptfoo_words.unknown_check(key, value, NEGATABLE)


def regex_problem(pattern: str) -> str | None:
    """Why a `regex` check's pattern cannot run, or None: it runs as the check runs it
    (`fim.eval.assertions`), RE2 first and Python's `re` for what RE2 cannot (lookaround,
    backreferences), so only a pattern both refuse is a mistake. Found by `fim validate`
    (top-level checks: `fim.build.eval_checks`; inside `not:`, here), not as a failing
    case after the model was paid for."""
    try:  # Python's first: compiling with it loads nothing (RE2's module costs a few ms)
        re.compile(pattern)
    except re.error as exc:
        problem = f"regex: /{pattern}/ does not compile: {exc}"
    except (OverflowError, RecursionError, MemoryError) as exc:
        problem = f"regex: /{pattern}/ does not compile: {type(exc).__name__}: {exc}"
    else:
        return None
    return None if pattern_matches(pattern, "") is not None else problem


class EvalCase(Strict):
    name: str = ""
    """Case name, unique in the suite (`-k suite/case` selects it); a case of the suite's
    YAML without one is `case N` (a CSV row's `row N`, a JSONL line's `line N`)."""
    input: str | list[dict[str, Any]] | dict[str, Any]
    """Prompt text, a list of chat messages, or workflow inputs."""
    vars: dict[str, Any] = Field(default_factory=dict)
    """Values substituted into `input` as `{{ name }}`."""
    expect: list[Assertion] = Field(default_factory=empty_list)
    """Assertions that must all hold; each sets exactly one key."""
    repeat: int = Field(default=1, ge=1)
    """Runs of this case (the suite's `repeat` if larger); each counts toward the pass rate."""
    min_pass_rate: float | None = Field(default=None, ge=0, le=1)
    """With `repeat`: the share of this case's runs that must pass (`0.8`: 4 of 5), ADK's
    `num_runs` with a threshold; the case counts once in the suite's pass rate, and fails
    the suite when its runs fall short, whatever the suite's `threshold`."""
    approvals: Literal["approve", "deny"] | ApprovalAnswers = "deny"
    """How a `confirm` hook's request is answered under `fim eval --with-hooks`, at once:
    nobody can answer in an eval, and waiting would hang it for the hook's timeout.
    `deny` (default: the call is blocked, the reason in the trace), `approve`, or
    `{approve: [save_note]}` (those tools approved, every other call denied)."""
    elicitation: Literal["decline", "cancel"] | ElicitationAnswer = "decline"
    """How an MCP server's question to the user is answered under `fim eval --with-hooks`,
    at once: `decline` (default), `cancel`, or `{accept: {field: value}}`. Without
    `--with-hooks` fim declines every question itself."""
    xfail: str | None = Field(default=None, min_length=1)
    """Why the case is known to fail (pytest's `xfail`): it still runs; a failure is
    reported as XFAIL (JUnit `<skipped>`) and fails no gate, outside the pass rate; a pass
    is reported as XPASS (remove the `xfail`) and fails no gate either."""

    @classmethod
    def unknown_key_hint(cls, key: str, value: Any) -> str | None:
        """promptfoo's keys of a test in fim's words (`assert` is `expect`)."""
        return promptfoo_words.CASE_KEYS.get(key)


CASE_FILE_SUFFIXES = (".csv", ".jsonl")
"""What a case file may be: a spreadsheet export, or one case object per line."""

CaseFile = Annotated[
    str,
    Field(
        pattern=r"\.(csv|jsonl)$",
        description=(
            "A file of cases in the suite's folder: CSV (a row per case; an `input` column, "
            "`name`, `__expected`/`__expected1..N` assertions such as `contains: Paris`, "
            "`__approvals` (approve, deny, or approve: tool, tool), other columns are vars) "
            "or JSONL (a case object per line). `file://` may lead."
        ),
    ),
]
"""A case file named in `cases` (`fim.config.case_files` reads it)."""


class EvalSuite(Strict):
    """An eval suite in evals/<name>.yaml, targeting an agent or a workflow."""

    name: str = ""
    """Suite name (default: the file name)."""
    description: str = ""
    """What the suite checks."""
    agent: str | None = None
    """Agent the cases run (or set `workflow`)."""
    workflow: str | None = None
    """Workflow the cases run, `input` being its inputs (or set `agent`)."""
    threshold: float = Field(default=1.0, ge=0, le=1)
    """Pass rate the suite needs for `fim eval` to exit 0."""
    hooks: HooksSwitch = None
    """`on`: `fim eval` runs the target with its hooks, as deployed (`--without-hooks`
    overrides); `off`: bypassed on purpose. Unset: bypassed unless `--with-hooks`, and a
    run that would execute real tool effects a PreToolUse hook guards is refused."""
    repeat: int = Field(default=1, ge=1)
    """Runs of every case (a case's own `repeat` if larger)."""
    default_expect: Annotated[
        list[Assertion], BeforeValidator(promptfoo_words.default_test_form)
    ] = Field(default_factory=empty_list)
    """Assertions every case must also meet, added after its own `expect` (CSV and JSONL
    cases too), as promptfoo's `defaultTest` adds its `assert` to each test's: the
    `not_contains: sorry` a suite wants of every row, written once: promptfoo's
    `defaultTest.assert` list, one level up. A case's own `expect` adds to these, never
    replaces them."""
    cases: Annotated[
        list[EvalCase],
        BeforeValidator(written_cases, json_schema_input_type=CaseFile | list[EvalCase | CaseFile]),
    ]
    """The cases: a list of `{name, input, expect}`, a CSV or JSONL file of them next to the
    suite (`cases: cases.csv`), or a list mixing both."""

    @classmethod
    def unknown_key_hint(cls, key: str, value: Any) -> str | None:
        """promptfoo's top-level keys in fim's words (`tests` is `cases`)."""
        return promptfoo_words.suite_key(key, value)

    default_vars: dict[str, Any] = Field(default_factory=dict)
    """Vars every case gets (promptfoo's `defaultTest.vars`); a case's own var wins."""

    @model_validator(mode="after")
    def _shared_expectations(self) -> EvalSuite:
        """`default_expect` appended to each case's `expect` once, here (`default_vars` put
        under its `vars`): the runner, the reports, `-k` and the checks see one list per
        case, the shared assertions after the case's own. Copies, not edits: a case read
        from a file is an already validated `EvalCase`, kept by the object the loader read."""
        if self.default_expect or self.default_vars:
            add, shared = self.default_expect, self.default_vars
            cases = [
                case.model_copy(update={"expect": [*case.expect, *add], "vars": shared | case.vars})
                for case in self.cases
            ]
            object.__setattr__(self, "cases", cases)  # frozen: set once, while validating
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _one_target(cls, data: Any, handler: ModelWrapValidatorHandler[EvalSuite]) -> EvalSuite:
        """Exactly one of `agent` and `workflow`, said with the fields' problems."""
        suite: EvalSuite = one_target(data, handler)
        return suite
