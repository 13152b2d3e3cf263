"""Spend declarations: a model's price override and the `budget:` of an agent or the project.

Kept apart from the agent and project schema so the accounting rules read in one place."""

from __future__ import annotations

from pydantic import Field, model_validator

from fim.config.schema.base import Strict


class Price(Strict):
    """Dollars per million tokens; overrides litellm's price table for this model (a
    self-hosted or negotiated model the table does not know, or prices that changed)."""

    input_per_mtok: float = Field(ge=0)
    """Dollars per million prompt tokens."""
    output_per_mtok: float = Field(ge=0)
    """Dollars per million completion tokens."""
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    """Dollars per million cached prompt tokens; defaults to `input_per_mtok`."""


class Budget(Strict):
    """Spend limits per run, per UTC day and per session, enforced before each model call
    (an estimate of the prompt) and after it (the provider's count). Exceeding one stops the
    run with a `budget_exceeded` error event. A cost limit on a model without a known price
    fails closed: the run is refused rather than run unmetered.

    The session limits sit beside the daily ones (`_per_session` like `_per_day`) because
    they are the same rule over another group of runs: what the state store recorded for
    the session, plus the run in progress. A run that continues no session (no
    `session_id`, no `--session`, no A2A context) has no session limit to meet."""

    max_tokens: int | None = Field(default=None, ge=1)
    """Prompt plus completion tokens one run may spend across all its model calls."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Dollars one run may spend across all its model calls."""
    max_tokens_per_day: int | None = Field(default=None, ge=1)
    """Tokens all runs (of this agent; for the project's budget, of every agent) may spend
    per UTC day, as recorded in the state store plus the run in progress."""
    max_cost_usd_per_day: float | None = Field(default=None, gt=0)
    """Dollars all runs (of this agent, or of the project) may spend per UTC day."""
    max_tokens_per_session: int | None = Field(default=None, ge=1)
    """Tokens all runs of one session (`session_id` over HTTP and MCP, an A2A context,
    `fim run --session`) may spend, of this agent or, for the project's budget, of every
    agent; a session that has spent it is refused before its next model call."""
    max_cost_usd_per_session: float | None = Field(default=None, gt=0)
    """Dollars all runs of one session (of this agent, or of the project) may spend."""

    @model_validator(mode="after")
    def _something(self) -> Budget:
        if not self.limits():
            raise ValueError(
                "a budget needs max_tokens, max_cost_usd, max_tokens_per_day, "
                "max_cost_usd_per_day, max_tokens_per_session or max_cost_usd_per_session"
            )
        return self

    def limits(self) -> list[str]:
        return [k for k, v in self.model_dump().items() if v is not None]

    @property
    def daily(self) -> bool:
        return self.max_tokens_per_day is not None or self.max_cost_usd_per_day is not None

    @property
    def per_session(self) -> bool:
        return self.max_tokens_per_session is not None or self.max_cost_usd_per_session is not None
