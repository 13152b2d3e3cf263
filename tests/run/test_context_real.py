"""bench/context_real.py's figures as assertions (issue 21): a hub agent built from the
public fixtures costs >= 97% fewer first-request tokens than legacy mode, and no
`discover` or `read_skill` observation exceeds the budget."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.config.schema import HttpConnector
from fim.run.budget import budget_tokens

BENCH = Path(__file__).resolve().parents[2] / "bench" / "context_real.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("context_real", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_public_hub_is_97_percent_cheaper_and_within_budget(
    bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("DISCORD_API_KEY", "GITHUB_TOKEN", "PETSTORE_URL"):
        monkeypatch.setenv(var, "test-placeholder")
    snapshot = compile_project(bench.project(tmp_path))
    progressive = await bench.first_request(snapshot, legacy=False)
    legacy = await bench.first_request(snapshot, legacy=True)
    assert legacy[2] > 1400 and progressive[2] == 2
    assert sum(progressive[:2]) <= 0.03 * sum(legacy[:2])
    decls = {n: c for n, c in snapshot.connectors.items() if isinstance(c, HttpConnector)}
    worst, _ = bench.largest_observation(decls)
    assert 0 < worst <= budget_tokens()
    skill_worst, _ = await bench.largest_read_skill(snapshot)
    assert 0 < skill_worst <= budget_tokens()
