"""What an eval's cases load on first use, loaded before the first case's clock starts.

The first cases of a run used to pay for importing the engines, the workflow templates,
litellm's price table and the HTTP client, and at concurrency 8 every case started with
them waited for it: a 0.1 ms scripted case reported 250 ms and a 95 ms call 830 ms
(newcomer9 #3). A case's latency is its own (`fim.eval.latency`); this is the runner's.

What a first tool call and a workflow's first run load is warmed too: the state store,
opened (a workflow run is recorded there: ~0.5 s of SQLAlchemy imports and set-up that held
the event loop for every case in flight), the connectors' provider, Jinja (instructions
are rendered by it), and each builtin tool the cases can call, with its argument validator
built (`fim.schema_check.validator`). A model-free case took 544 ms alone and 1,028-1,568
ms in a full run, behind them (newcomer51 #3).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from fim.errors import RunError

STORE_MODULES = ("fim.store", "sqlalchemy", "sqlalchemy.pool")
"""What a workflow run loads to record itself (`fim.store.engine` imports SQLAlchemy on
first use), imported when the store cannot be opened here."""


def _tools(snapshot: Any, suites: Sequence[Any]) -> list[str]:
    """The builtin tools the suites' targets name: their agents' `tools:`, a workflow's
    tool nodes and its agent nodes' agents'."""
    agents = [suite.agent for suite in suites if suite.agent is not None]
    names: list[str] = []
    for suite in suites:
        workflow = snapshot.workflows.get(suite.workflow or "")
        for node in workflow.nodes.values() if workflow is not None else ():
            uses = node.uses()
            names += uses.tools
            agents += uses.agents
    for name in agents:
        agent = snapshot.agents.get(name)
        names += agent.tools if agent is not None else ()
    return [name for name in dict.fromkeys(names) if ":" not in name]


def warm_tools(names: Sequence[str]) -> None:
    """Load each builtin among `names` and build the validator of its arguments' schema,
    which its first call builds otherwise (jsonschema and its referencing library load
    then); one configured per run (`make(ctx)`) is loaded only."""
    # deferred: the builtins and jsonschema load here, in the warm-up's thread
    from fim.schema_check import validator
    from fim.tools import builtin

    known = set(builtin.names())
    for name in names:
        if name not in known:
            continue
        try:
            tool = builtin.load(name)
        except RunError:  # built per run (`make(ctx)`): its module is loaded now
            continue
        with suppress(Exception):  # an invalid schema: the call says so, as it would
            validator(tool.parameters)


def open_store(services: Any) -> None:
    """Open the state store the cases' workflow runs are recorded in (blocking)."""
    # deferred: loading the state store costs tens of ms
    from fim.store import get_store

    with suppress(Exception):  # a store that cannot open: the case that needs it says so
        get_store(services).open()


def warm_up(
    snapshot: Any,
    jobs: Sequence[tuple[Any, Any, int]],
    calls: bool,
    model: str | None,
    services: Any = None,
) -> None:
    """Import what the planned cases' runs import on first use (blocking: the runner calls
    it in a worker thread before any case starts). `calls`: the run asks real models
    (`--live`, `--record`), whose backends' libraries load too; `model` is `--model`'s;
    `services`: the run's, whose state store a workflow case's run is recorded in."""
    suites = {suite.name: suite for suite, _, _ in jobs}.values()
    modules = []
    if any(suite.agent is not None for suite in suites):
        modules += ["fim.run.agent", "fim.connectors.provider", "jinja2"]
    if any(suite.workflow is not None for suite in suites):
        modules += ["fim.workflows.engine", *STORE_MODULES]
        if services is not None:
            open_store(services)
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
    warm_tools(_tools(snapshot, list(suites)))
    if modules:
        # deferred: the price table is read by the first run's plan otherwise
        from fim.llm import catalog

        catalog.table()
