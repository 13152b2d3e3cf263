"""Whether a run's model is metered: `metered` wraps it in `fim.run.spend.MeteredModel`
when a price override or a budget applies to the run, and hands it back unchanged (no cost
per call) otherwise. Built in `fim.run.plan.build_plan` and for a run's `fast` model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.run.limits import file_of, run_budgets
from fim.run.overrides import OverriddenModel
from fim.run.spend import MeteredModel
from fim.run.tree import RunSpend

if TYPE_CHECKING:
    from fim.types import Model


def metered(
    model: Model,
    snapshot: Any,
    agent: Any,
    services: Any = None,
    session: str | None = None,
    spend: RunSpend | None = None,
    fast: bool = False,
    run_id: str | None = None,
) -> Model:
    """`model` wrapped when a price override or a budget applies to this agent's runs, or a
    per-run limit of a run above it (`spend`, the run's place in its tree); unchanged (no
    cost per call) otherwise. `session` is the conversation the run continues (its session
    budgets count the session's recorded runs). `fast`: `model` is the run's `fast` model
    (context summaries, tool selection, MCP sampling), priced as the `fast` role, its
    calls counted in the run's usage row though no event reports them. A model carrying a
    caller's overrides (`OverriddenModel`) is metered inside them, so the cap each call is
    sent with is the smaller of the caller's and the room it holds (`with_cap`)."""
    if isinstance(model, OverriddenModel):  # inside it, the cap sees the caller's options
        inner = metered(model.inner, snapshot, agent, services, session, spend, fast, run_id)
        return model if inner is model.inner else OverriddenModel(inner, model.overrides)
    budgets = run_budgets(snapshot, agent)
    price = None
    for role in ("fast", agent.model) if fast else (agent.model,):
        try:
            price = snapshot.model_settings(role).price
            break
        except RunError:  # a model handed in by the caller for a role fim.yaml lacks
            continue
    above = spend is not None and any(node.budgets for node in spend.ancestors())
    if not budgets and price is None and not above:
        return model
    agents = [agent.name, *(node.agent for node in spend.ancestors())] if spend else [agent.name]
    declared_in = {f"agent '{name}'": file_of(snapshot, name) for name in agents}
    return MeteredModel(
        model,
        budgets,
        price,
        services=services,
        agent=agent.name,
        session=session,
        spend=spend,
        declared_in=declared_in,
        side=fast,
        run_id=run_id,
    )
