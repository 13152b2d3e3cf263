"""A case's var holding a list where its input names it as one value (`{{ ticket }}`).

promptfoo runs a test once per value of a list var; fim renders the list into the input
as one JSON text and runs one case. A suite ported from promptfoo then passes on an input
nobody meant (`'["My card was charged twice", "I was charged twice again"]'`), so a list
var that the input names bare is a problem at the var. A list meant as JSON text says so
with `{{ ticket | tojson }}`; one read item by item (`{% for t in tickets %}`) is no
problem. fim does not expand the list itself: a case is one run with one name, which
`-k suite/case`, baselines and cassettes go by.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

Where = tuple[str | int, ...]


def _texts(value: Any) -> Iterator[str]:
    """Every string of an input: text, chat messages or workflow inputs."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def list_var_problems(case: Any) -> list[tuple[Where, str, str]]:
    """(path in the case, message, hint) of each list var its input names bare."""
    if not isinstance(case, dict) or not isinstance(case.get("vars"), dict):
        return []
    texts = list(_texts(case.get("input")))
    found: list[tuple[Where, str, str]] = []
    for name, value in case["vars"].items():
        if not isinstance(name, str) or not isinstance(value, list):
            continue
        bare = re.compile(r"\{\{-?\s*" + re.escape(name) + r"\s*-?\}\}")
        if any(bare.search(text) for text in texts):
            found.append(
                (
                    ("vars", name),
                    f"var '{name}' is a list: the input gets it as one JSON text, in one case",
                    "promptfoo runs a test per value, fim does not: write a case per value, "
                    f"or {{{{ {name} | tojson }}}} to send the list as JSON",
                )
            )
    return found


__all__ = ["list_var_problems"]
