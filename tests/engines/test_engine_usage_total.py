"""The run's usage is summed once at its end (`fim.engines.react._total`), with exactly the
result of adding each call's `Usage` in turn, as the engine did before."""

from __future__ import annotations

import functools
import itertools

import pytest

from fim.engines.react import _total
from fim.types import Usage

CALLS = [
    Usage(),
    Usage(prompt_tokens=10, completion_tokens=5),
    Usage(prompt_tokens=3, completion_tokens=1, cost=0.0, cached_tokens=2),
    Usage(prompt_tokens=7, cost=0.1),
    Usage(completion_tokens=2, cost=0.2),
]


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_total_equals_adding_in_turn(count: int) -> None:
    for spent in itertools.permutations(CALLS, count):
        expected = functools.reduce(lambda a, b: a + b, spent, Usage())
        got = _total(list(spent))
        assert got.model_dump() == expected.model_dump()
        assert type(got.cost) is type(expected.cost)
