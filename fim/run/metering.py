"""Whether a run's model is metered: `metered` wraps it in `fim.run.spend.MeteredModel`
when a price override or a budget applies to the run, and hands it back unchanged (no cost
per call) otherwise. Built in `fim.run.plan.build_plan` and for a run's `fast` model.

The price is the model's that is called (`model_price`), not the agent's role's: `fim run
-m haiku` and `fim eval -m haiku` ran an agent on another role, and its calls were priced
at the agent's role (newcomer9 #2), or not at all when only `haiku` had a `price:`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.config.schema import ModelSettings
from fim.config.schema.spend import Price
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
    price = model_price(model, snapshot, agent, fast)
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


def settings_of(model: Any) -> ModelSettings | None:
    """The settings `model` was built from, found through the wrappers around it (an eval's
    cassette and call slots, the JSON-mode fallback, a caller's overrides), or None: a
    model handed in that does not say (a test's `ScriptedModel`)."""
    seen = model
    for _ in range(16):  # a chain of wrappers, never a cycle in practice
        settings = getattr(seen, "settings", None)
        if isinstance(settings, ModelSettings):
            return settings
        seen = getattr(seen, "inner", None)
        if seen is None:
            return None
    return None


def model_price(model: Any, snapshot: Any, agent: Any, fast: bool = False) -> Price | None:
    """The `price:` of the model called: its own settings' (a role's `price:` travels with
    the settings the model was built from), else that of the role whose model string it
    is, else that of the role it stands in for (the agent's, or `fast`). None: litellm's
    price table prices it, or nothing does (a cost limit then fails closed)."""
    settings = settings_of(model)
    if settings is not None:
        return settings.price
    roles: list[ModelSettings] = []
    for role in ("fast", agent.model) if fast else (agent.model,):
        try:
            roles.append(snapshot.model_settings(role))
        except RunError:  # a model handed in by the caller for a role fim.yaml lacks
            continue
    name = getattr(model, "name", None)
    named = [s for s in roles if s.model == name]
    named = named or [s for s in snapshot.models.values() if s.model == name]
    if named and all(s.price == named[0].price for s in named):
        return named[0].price
    return roles[0].price if roles else None
