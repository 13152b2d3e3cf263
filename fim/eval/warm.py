"""What an eval's cases load on first use, loaded before the first case's clock starts.

The first cases of a run used to pay for importing the engines, the workflow templates,
litellm's price table and the HTTP client, and at concurrency 8 every case started with
them waited for it: a 0.1 ms scripted case reported 250 ms and a 95 ms call 830 ms
(newcomer9 #3). A case's latency is its own (`fim.eval.latency`); this is the runner's.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from fim.errors import RunError


def warm_up(
    snapshot: Any, jobs: Sequence[tuple[Any, Any, int]], calls: bool, model: str | None
) -> None:
    """Import what the planned cases' runs import on first use (blocking: the runner calls
    it in a worker thread before any case starts). `calls`: the run asks real models
    (`--live`, `--record`), whose backends' libraries load too; `model` is `--model`'s."""
    suites = {suite.name: suite for suite, _, _ in jobs}.values()
    modules = []
    if any(suite.agent is not None for suite in suites):
        modules.append("fim.run.agent")
    if any(suite.workflow is not None for suite in suites):
        modules.append("fim.workflows.engine")
    if any(case.vars for _, case, _ in jobs):
        modules.append("fim.workflows.templates")
    if calls:
        # deferred: fim.llm loads the backends' modules; only a run that calls models needs it
        from fim.llm import libraries_for

        settings = list(snapshot.models_in_use())
        if model is not None:
            with suppress(RunError):  # `fim eval` checked it; a run says what is wrong
                settings.append(snapshot.model_settings(model))
        modules += ["aiohttp", *libraries_for(settings)]
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:  # the case that needs it says what is missing
            continue
    if modules:
        # deferred: the price table is read by the first run's plan otherwise
        from fim.llm import catalog

        catalog.table()
