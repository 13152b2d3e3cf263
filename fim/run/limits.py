"""Spend limits as numbers: the error a passed limit raises, a fim.yaml price applied, and
how much room a limit leaves a model call. `fim.run.spend.MeteredModel` applies them
before and after each call; kept apart so the arithmetic and its messages read in one
place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fim.errors import RunError
from fim.run.in_flight import Pool
from fim.types import Usage

if TYPE_CHECKING:
    from fim.config.schema.spend import Price


class BudgetExceeded(RunError):
    """A run passed one of its spend limits; `usage` is what the refused call spent (zero
    when it was refused before being made)."""

    kind = "budget_exceeded"

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(
            message, hint="raise `budget:` in the agent file or fim.yaml if this is expected"
        )
        self.usage = usage or Usage()


def priced(usage: Usage, price: Price) -> Usage:
    """`usage` with its cost recomputed from a fim.yaml price (dollars per million tokens)."""
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    cached_price = (
        price.input_per_mtok if price.cached_input_per_mtok is None else price.cached_input_per_mtok
    )
    cost = (
        (usage.prompt_tokens - cached) * price.input_per_mtok
        + cached * cached_price
        + usage.completion_tokens * price.output_per_mtok
    ) / 1_000_000
    return usage.model_copy(update={"cost": cost})


KEY = "API key"
"""The label of `server.key_budget`: counted over the runs of the key running now."""

WAIT_FOR_ROOM = 600.0
"""Seconds a call waits at most for calls in flight holding its budget's room."""

DEFAULT_ALLOWANCE = 4096
"""Completion tokens a call is assumed to take when its model sets no `max_tokens`: what it
holds reserved under a limit while it is in flight. Near a limit a call is sent with
`max_tokens` cut to the room left, so that it cannot pass the limit whatever it answers."""

_UNLIMITED = 1 << 62


def setting(label: str) -> str:
    """Where the limit a message names is set: `server.key_budget` or a `budget:`."""
    return "server.key_budget" if label.startswith(KEY) else "budget"


@dataclass
class Limit:
    """One limit that holds for a call, and what counts against it."""

    label: str
    per: str
    """The setting's suffix: "" (per run), `_per_day` or `_per_session`."""
    max_tokens: int | None
    max_cost: float | None
    spent: Usage
    """Spent so far: the run tree's (per run), or what the store recorded plus this
    process's runs in flight (daily, session)."""
    pool: Pool
    """Where the calls in flight under this limit hold room (`fim.run.in_flight`)."""

    def room(
        self, estimate: int, prompt_cost: float | None, per_1k: float | None
    ) -> tuple[int, int]:
        """Completion tokens this limit leaves a call whose prompt is about `estimate`
        tokens (`prompt_cost` dollars; completions `per_1k` dollars a thousand): after what
        was spent, and after what the calls in flight hold too (no limit: a large number).
        A cost limit with no known price leaves none (`refusal` says why)."""
        spent_room = held_room = _UNLIMITED
        if self.max_tokens is not None:
            spent_room = self.max_tokens - self.spent.total_tokens - estimate
            held_room = spent_room - self.pool.held_tokens
        if self.max_cost is not None:
            if prompt_cost is None:
                return 0, 0
            dollars = self.max_cost - (self.spent.cost or 0.0) - prompt_cost
            held = dollars - self.pool.held_cost
            spent_room = min(spent_room, _tokens(dollars, per_1k))
            held_room = min(held_room, _tokens(held, per_1k))
        return spent_room, held_room

    def refusal(self, model: str, estimate: int, prompt_cost: float | None) -> str:
        """Why a call was refused before it was made (`room` left it none)."""
        where, so_far = setting(self.label), self.spent
        if self.max_cost is not None and prompt_cost is None:
            return (
                f"{self.label} sets a cost limit but the price of model '{model}' is unknown; "
                "the model was not called (set `price:` on the model in fim.yaml)"
            )
        if self.max_tokens is not None and so_far.total_tokens + estimate >= self.max_tokens:
            return (
                f"{self.label}: {so_far.total_tokens} tokens spent and the next prompt is "
                f"about {estimate}, above {where}.max_tokens{self.per} {self.max_tokens}; "
                "the model was not called"
            )
        return (
            f"{self.label}: ${so_far.cost or 0.0:.6f} spent and the next prompt costs about "
            f"${prompt_cost or 0.0:.6f}, above {where}.max_cost_usd{self.per} "
            f"{self.max_cost}; the model was not called"
        )

    def passed(self, model: str, usage: Usage) -> BudgetExceeded | None:
        """The error when what was spent, the call that just answered (`usage`) included,
        is past this limit; None while it holds."""
        where, so_far = setting(self.label), self.spent
        if self.max_tokens is not None and so_far.total_tokens > self.max_tokens:
            return BudgetExceeded(
                f"{self.label}: {so_far.total_tokens} tokens spent, "
                f"above {where}.max_tokens{self.per} {self.max_tokens}",
                usage,
            )
        if self.max_cost is None:
            return None
        if usage.total_tokens and usage.cost is None:
            return BudgetExceeded(
                f"{self.label} sets a cost limit but model '{model}' reported no price for "
                "its call (set `price:` on the model in fim.yaml)",
                usage,
            )
        if (so_far.cost or 0.0) > self.max_cost:
            return BudgetExceeded(
                f"{self.label}: ${so_far.cost or 0.0:.6f} spent, "
                f"above {where}.max_cost_usd{self.per} {self.max_cost}",
                usage,
            )
        return None


def _tokens(dollars: float, per_1k: float | None) -> int:
    """Completion tokens `dollars` buy (none when nothing is left; unlimited at no price)."""
    if dollars <= 0:
        return 0
    return _UNLIMITED if not per_1k else int(dollars * 1000 / per_1k)


@dataclass
class Ticket:
    """One admitted call: its prompt estimate and the room it holds, in which pools."""

    estimate: int
    pools: list[Pool]
    tokens: int
    cost: float
    max_tokens: int | None
    """The completion cap sent with the call (None: the model's own setting holds)."""

    def release(self) -> None:
        """The call answered or failed: the room it held is free again."""
        for found in self.pools:
            found.release(self.tokens, self.cost)
