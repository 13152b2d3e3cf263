"""promptfoo's words in an eval suite, and fim's spelling of each: the hints a suite ported
from promptfoo gets where fim reads it (`fim.config.schema.evals`, a CSV cell).

A promptfoo user writes `assert:`, `tests:`, `type: icontains` / `value: billing` and
`not-icontains` from memory. fim keeps one vocabulary (the YAML keys, the CSV cells and the
reports' assertion kinds say the same), so these words are not accepted as aliases: each is
an error whose hint is the fim spelling, with the user's own value where there is one
(`write \\`icontains: billing\\``). A did-you-mean over fim's keys gets them wrong in
ways that change what is checked (`not_regex` was "did you mean 'regex'?").
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from pydantic_core import PydanticCustomError

from fim.config.suggestions import suggest
from fim.errors import Problem

SAME = {
    "equals",
    "contains",
    "icontains",
    "contains_any",
    "contains_all",
    "icontains_any",
    "icontains_all",
    "starts_with",
    "regex",
    "is_json",
    "contains_json",
    "python",
}
"""promptfoo assertion types fim spells the same, once `-` is read as `_`."""

RENAMED = {
    "llm_rubric": "judge",
    "model_graded_closedqa": "judge",
    "model_graded_factuality": "judge",
    "factuality": "judge",
    "g_eval": "judge",
    "answer_relevance": "judge",
    "context_faithfulness": "judge",
    "context_recall": "judge",
    "context_relevance": "judge",
    "conversation_relevance": "judge",
    "latency": "latency_ms",
    "cost": "max_cost",
    "not_contains": "not_contains",
}
"""promptfoo assertion types fim has under another name (the graded ones are a `judge`)."""

_CODE = "fim's own checks are Python: `python: module:function`, a function in hooks/"
_METRIC = "a `python: module:function` check computes it; a score passes at its threshold"
_MARKUP = "fim has no XML, HTML or SQL check: a `regex:` or a `python:` check"
_GRADED = "a `judge: <rubric>` or a `python:` check"
UNSUPPORTED = {
    "javascript": _CODE,
    "fn": _CODE,
    "ruby": _CODE,
    "similar": "fim has no embedding similarity: a `judge: <rubric>` or a `python:` check",
    "levenshtein": _METRIC,
    "rouge_n": _METRIC,
    "bleu": _METRIC,
    "gleu": _METRIC,
    "meteor": _METRIC,
    "perplexity": _METRIC,
    "perplexity_score": _METRIC,
    "word_count": _METRIC,
    "is_xml": _MARKUP,
    "contains_xml": _MARKUP,
    "is_html": _MARKUP,
    "contains_html": _MARKUP,
    "is_sql": _MARKUP,
    "contains_sql": _MARKUP,
    "is_valid_openai_tools_call": "`tool_called: NAME` checks the tool calls the agent made",
    "is_valid_openai_function_call": "`tool_called: NAME` checks the tool calls the agent made",
    "is_valid_function_call": "`tool_called: NAME` checks the tool calls the agent made",
    "moderation": _GRADED,
    "classifier": _GRADED,
    "guardrails": _GRADED,
    "is_refusal": _GRADED,
    "select_best": _GRADED,
    "webhook": _CODE,
}
"""promptfoo assertion types fim has no counterpart for, with what to write instead."""

SUITE_KEYS = {
    "tests": "fim calls it `cases:`, a list of cases or a file such as `cases: tests.csv`",
    "providers": "a suite runs its agent's `model:`; compare models with "
    "`fim eval SUITE -m ROLE -m ROLE`",
    "prompts": "the prompt is the agent's `instructions:`; a case's `input:` is the user "
    'message, `input: "{{ ticket }}"` for a var',
    "assert": "assertions go in a case's `expect:`, or in `default_expect:` for every case",
    "evaluateOptions": "fim eval --concurrency N; a suite's `repeat: N` runs each case N times",
    "outputPath": "fim eval --json FILE, --junit FILE or --format markdown",
}
"""promptfoo's top-level keys of a config, and fim's counterpart (`defaultTest`'s hint is
`default_test`'s, which reads its value)."""
SUITE_KEYS["provider"] = SUITE_KEYS["models"] = SUITE_KEYS["targets"] = SUITE_KEYS["providers"]

_DEFAULT_TEST = "write `default_expect: [...]` (the list under defaultTest.assert)"


def default_test(value: Any) -> str:
    """The hint for promptfoo's `defaultTest: {assert: [...], vars: ...}`: fim's
    `default_expect` is its `assert` list, `default_vars` its `vars`, and what else it
    holds has no place."""
    hint = _DEFAULT_TEST
    if isinstance(value, Mapping):
        if "vars" in value:
            hint += ", and `default_vars: {...}` (the mapping under defaultTest.vars)"
        others = [str(k) for k in value if k not in ("assert", "vars")]
        if others:
            hint += f"; fim has no defaultTest.{', defaultTest.'.join(others)}"
    return hint


def suite_key(key: str, value: Any) -> str | None:
    """The hint for promptfoo's top-level key `key` of a suite, or None."""
    return default_test(value) if key == "defaultTest" else SUITE_KEYS.get(key)


def default_test_form(value: Any) -> Any:
    """`default_expect: {assert: [...]}`, promptfoo's `defaultTest` renamed but kept whole:
    said as `defaultTest:` is, not as a mapping where a list goes."""
    if isinstance(value, Mapping) and "assert" in value:
        raise PydanticCustomError("list_type", "expected a list", {"hint": default_test(value)})
    return value


CASE_KEYS = {
    "assert": "fim calls it `expect:`",
    "description": "fim calls it `name:`",
    "threshold": "a case passes when all its `expect` hold; the pass rate a suite needs is "
    "its `threshold:`",
    "provider": SUITE_KEYS["providers"],
    "prompt": "fim calls it `input:`",
}
"""promptfoo's keys of a test, and fim's counterpart."""

ASSERTION_KEYS = {
    "value": "an assertion is `<check>: <value>`, such as `icontains: billing`",
    "threshold": "an assertion is `<check>: <value>`; `python:` takes `{function, threshold}`",
    "weight": "fim has no weights: a case passes when every assertion holds",
    "metric": "fim has no named metrics: the report names each assertion by its check",
    "transform": "fim has no transform: a `python:` check can parse the output first",
}
"""promptfoo's keys of an assertion other than `type` (which `typed_form` handles)."""

_NEGATED = re.compile(r"not[_-](?P<base>.+)\Z", re.I)
_NEGATES = "fim negates checks with `not: {<check>: ...}`"

_MODELINE = re.compile(r"#\s*yaml-language-server:\s*\$schema=(?P<url>\S+)")
"""An editor's modeline attaching a JSON Schema to the file (yaml-language-server's)."""


def foreign_schema(text: str, path: str) -> Problem | None:
    """A warning for a suite whose modeline (its first lines) attaches another tool's
    schema, such as promptfoo's `$schema=https://promptfoo.dev/config-schema.json` kept from
    the ported config: the editor checks the suite against that schema, and fim's keys show
    as mistakes there. None for fim's own (`eval.schema.json`) or no modeline."""
    for number, line in enumerate(text.splitlines()[:10], 1):
        found = _MODELINE.search(line)
        if found is None or found["url"].endswith("eval.schema.json"):
            continue
        return Problem(
            path,
            number,
            found.start() + 1,
            f"this modeline attaches {found['url']}, so an editor checks the suite against "
            "that schema, not fim's",
            "delete the line, or attach fim's: `fim schema --write .fim/schema` prints the "
            "modeline of each kind",
        )
    return None


def normal(word: str) -> str:
    """A promptfoo type as fim spells keys: lower case, `-` read as `_`."""
    return word.strip().lower().replace("-", "_")


def fim_key(word: str) -> str | None:
    """fim's key for a promptfoo assertion type (`llm-rubric` -> `judge`), or None."""
    key = normal(word)
    return key if key in SAME else RENAMED.get(key)


def shown(value: Any) -> str:
    """A value as YAML a user can paste after `key: `: plain text when that reads back
    the same, else JSON (which is YAML); long ones cut."""
    if value is None:
        return "..."
    if isinstance(value, str):
        text = value if _plain(value) else json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(text: str) -> bool:
    """Whether `text` reads back as itself unquoted, in a flow mapping too (`{icontains:
    x}`): no `: `, ` #`, `,[]{}`, no leading indicator, not a YAML boolean or null."""
    return (
        re.fullmatch(r"[A-Za-z_][^\n,\[\]{}]*", text) is not None
        and text == text.rstrip()
        and ": " not in text
        and " #" not in text
        and not text.endswith(":")
        and text.lower() not in ("true", "false", "yes", "no", "on", "off", "null")
    )


def _python_ref(value: Any) -> Any:
    """promptfoo's `file://checks.py:is_high` as fim's `checks:is_high`."""
    if isinstance(value, str):
        found = re.fullmatch(r"(?:file://)?(?:hooks/)?([\w/]+)\.py:(\w+)", value.strip())
        if found:
            return f"{found[1].replace('/', '.')}:{found[2]}"
    return value


def spelled(word: str, value: Any, negatable: Collection[str], threshold: Any = None) -> str:
    """The fim assertion for promptfoo's `word` with `value` (`threshold` where promptfoo
    puts a number there), as a hint: `write \\`not: {icontains: x}\\``, or what to use
    where fim has no such check."""
    key = normal(word)
    negated = _NEGATED.match(key)
    if negated is not None and key != "not_contains":
        base = fim_key(negated["base"])
        if base == "contains":
            return f"write `not_contains: {shown(value)}`"
        if base in negatable:
            inner = "true" if value is None and base in ("is_json", "contains_json") else None
            said = inner or shown(value)
            return f"write `not: {{{base}: {said}}}`, as fim negates any check of the output"
        if base == "judge":
            return "write the negation into the rubric: `judge: Does not ...`"
        return UNSUPPORTED.get(negated["base"], _NEGATES)
    fim = fim_key(key)
    if fim is None:
        return UNSUPPORTED.get(key, "")
    if fim in ("latency_ms", "max_cost"):
        value = threshold if threshold is not None else value
    elif fim in ("is_json", "contains_json"):
        if value is None:
            value = True
        elif fim == "is_json":  # promptfoo's `is-json` with a schema
            fim = "json_schema"
    elif fim == "python":
        value = _python_ref(value)
        if threshold is not None:
            value = {"function": value, "threshold": threshold}
    return f"write `{fim}: {'true' if value is True else shown(value)}`"


def typed_form(data: Mapping[str, Any], negatable: Collection[str]) -> tuple[str, str]:
    """(message, hint) for an assertion in promptfoo's `{type, value, threshold}` form."""
    word = str(data.get("type"))
    hint = spelled(word, data.get("value"), negatable, data.get("threshold"))
    if not hint or hint == _NEGATES:
        hint = _closest(word, data.get("value"), negatable, data.get("threshold")) or hint
    if not hint:
        hint = "an assertion is `<check>: <value>`, such as `icontains: billing`"
    dropped = [k for k in data if k in ("weight", "metric", "transform", "provider")]
    if dropped:
        hint += f"; fim has no {', '.join(f'`{k}`' for k in dropped)}"
    return f"`type: {word}` is promptfoo's form of an assertion", hint


def _closest(word: str, value: Any, negatable: Collection[str], threshold: Any) -> str:
    """The hint for a misspelt type (`type: equal`): "did you mean 'equals'? write
    `equals: Paris`", the closest of fim's checks and promptfoo's words of the same sense
    (`suggest` offers a negated word negated names only), or ""."""
    key = normal(word)
    negated = _NEGATED.match(key)
    words = {*SAME, *RENAMED, *UNSUPPORTED, *negatable}
    close = suggest(negated["base"] if negated else key, words)
    if close is None or not close.startswith("did you mean '"):
        return ""
    meant = ("not-" if negated else "") + close.split("'")[1]
    written = spelled(meant, value, negatable, threshold)
    return f"did you mean '{meant}'? {written}".strip()


def unknown_check(key: str, value: Any, negatable: Collection[str]) -> str | None:
    """The hint for an assertion key fim does not have that promptfoo spells so, or None."""
    if key in ASSERTION_KEYS:
        return ASSERTION_KEYS[key]
    if key == normal(key) and fim_key(key) == key:
        return None  # fim's own spelling: no promptfoo word
    hint = spelled(key, value, negatable)
    return hint or None


__all__ = [
    "CASE_KEYS",
    "SUITE_KEYS",
    "UNSUPPORTED",
    "default_test",
    "default_test_form",
    "fim_key",
    "foreign_schema",
    "normal",
    "shown",
    "spelled",
    "suite_key",
    "typed_form",
    "unknown_check",
]
