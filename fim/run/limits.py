"""Spend limits as numbers: the error a passed limit raises, a fim.yaml price applied, and
how much room a limit leaves a model call. `fim.run.spend.MeteredModel` applies them
before and after each call; kept apart so the arithmetic and its messages read in one
place. Also the completion cap a call is sent with (`with_cap`) and fim's count of a call
whose endpoint reported no usage (`estimated`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fim.errors import Abandoned, RunError
from fim.run.in_flight import Pool, off_loop
from fim.run.tokens import count_message
from fim.types import Usage

if TYPE_CHECKING:
    from fim.config.schema.spend import Budget, Price
    from fim.types import Message, ModelResponse


class BudgetExceeded(RunError):
    """A run passed one of its spend limits; `usage` is what the refused call spent (zero
    when it was refused before being made) and `response` that call's answer: the call was
    made and paid for, so the engines report it (`llm_call`) before the error. `hint`
    says what the caller can do about this limit (`Limit.hint`)."""

    kind = "budget_exceeded"

    def __init__(
        self,
        message: str,
        usage: Usage | None = None,
        *,
        hint: str | None = None,
        response: ModelResponse | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.usage = usage or Usage()
        self.response = response


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

CAP_FIELDS = (
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "max_new_tokens",
    "num_predict",
)
"""The spellings of a completion cap that reach a provider: `max_tokens` (fim's, and a
model's setting), `max_completion_tokens` (OpenAI's newer name; an OpenAI-endpoint caller
may send either under `client_sampling`), and the provider-native names a model's `extra:`
passes through litellm (Gemini's `max_output_tokens`, Hugging Face's `max_new_tokens`,
Ollama's `num_predict`)."""


def asked_cap(settings: Any, options: dict[str, Any]) -> int | None:
    """The smallest completion cap a call asks for, in any spelling: the model's
    `max_tokens` and `extra:`, and the call's options (an OpenAI-endpoint caller's
    `max_tokens`, an MCP sampling request's). None when nothing sets one. Under a limit the
    call holds at most this much room, so a caller's lower value is not over-reserved."""
    extra = getattr(settings, "extra", None) or {}
    asked = [getattr(settings, "max_tokens", None)]
    asked += [source.get(name) for source in (extra, options) for name in CAP_FIELDS]
    return min((v for v in asked if type(v) is int and v >= 1), default=None)


def with_cap(options: dict[str, Any], settings: Any, cap: int | None) -> dict[str, Any]:
    """`options` sending `cap` (the room the call holds) as its one completion cap,
    `max_tokens`: a caller's own cap in any spelling is dropped, since it is counted in
    `cap` already (`asked_cap`) and two fields that disagree leave the provider to pick
    either. A spelling the model's `extra:` sends cannot be dropped here (the backend adds
    it), so it is set to `cap` too. `cap` None (no limit): `options` go as they are."""
    if cap is None:
        return options
    extra = getattr(settings, "extra", None) or {}
    out = {name: value for name, value in options.items() if name not in CAP_FIELDS}
    out.update({name: cap for name in CAP_FIELDS if name in extra})
    out["max_tokens"] = cap
    return out


def setting(label: str) -> str:
    """Where the limit a message names is set: `server.key_budget` or a `budget:`."""
    return "server.key_budget" if label.startswith(KEY) else "budget"


def until_midnight(now: float | None = None) -> str:
    """How long until the UTC day ends (when daily limits start again), as `5h12m`."""
    now = time.time() if now is None else now
    left = int(86400 - now % 86400)
    return f"{left // 3600}h{left % 3600 // 60:02d}m"


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
    declared_in: str = "fim.yaml"
    """The file whose `budget:` (or `server.key_budget`) sets this limit, for the hint."""

    def hint(self, key: str) -> str:
        """What whoever hit the limit `key` (`max_tokens`, `max_cost_usd`) can do: a key's
        budget is the operator's, which a tenant cannot edit; a session's limit is left
        by starting a new session; a daily one ends at 00:00 UTC."""
        name = f"{setting(self.label)}.{key}{self.per}"
        if self.label.startswith(KEY):
            text = (
                f"{name} is this API key's limit, set by the server's operator in "
                f"{self.declared_in}: ask the operator to raise it"
            )
        else:
            text = f"raise {name} in {self.declared_in} if this is expected"
            if self.per == "_per_session":
                text = f"start a new session, or {text}"
        if self.per == "_per_day":
            text += f"; the day resets at 00:00 UTC (in {until_midnight()})"
        return text

    def unpriced(self, model: str) -> str:
        """The hint for a cost limit on a model with no known price (the only fix)."""
        fix = f"set `price:` on model '{model}' in fim.yaml's `models:`"
        return f"ask the server's operator to {fix}" if self.label.startswith(KEY) else fix

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

    def refusal(self, model: str, estimate: int, prompt_cost: float | None) -> BudgetExceeded:
        """Why a call was refused before it was made (`room` left it none)."""
        where, so_far = setting(self.label), self.spent
        if self.max_cost is not None and prompt_cost is None:
            return BudgetExceeded(
                f"{self.label} sets a cost limit ({where}.max_cost_usd{self.per}) but the "
                f"price of model '{model}' is unknown; the model was not called",
                hint=self.unpriced(model),
            )
        if self.max_tokens is not None and so_far.total_tokens + estimate >= self.max_tokens:
            return BudgetExceeded(
                f"{self.label}: {so_far.total_tokens} tokens spent and the next prompt is "
                f"about {estimate}, above {where}.max_tokens{self.per} {self.max_tokens}; "
                "the model was not called",
                hint=self.hint("max_tokens"),
            )
        return BudgetExceeded(
            f"{self.label}: ${so_far.cost or 0.0:.6f} spent and the next prompt costs about "
            f"${prompt_cost or 0.0:.6f}, above {where}.max_cost_usd{self.per} "
            f"{self.max_cost}; the model was not called",
            hint=self.hint("max_cost_usd"),
        )

    def passed(self, model: str, response: ModelResponse) -> BudgetExceeded | None:
        """The error when what was spent, the call that just answered (`response`, its
        usage priced) included, is past this limit; None while it holds."""
        where, so_far, usage = setting(self.label), self.spent, response.usage
        if self.max_tokens is not None and so_far.total_tokens > self.max_tokens:
            return BudgetExceeded(
                f"{self.label}: {so_far.total_tokens} tokens spent, "
                f"above {where}.max_tokens{self.per} {self.max_tokens}",
                usage,
                hint=self.hint("max_tokens"),
                response=response,
            )
        if self.max_cost is None:
            return None
        if usage.total_tokens and usage.cost is None:
            return BudgetExceeded(
                f"{self.label} sets a cost limit ({where}.max_cost_usd{self.per}) but model "
                f"'{model}' reported no price for its call",
                usage,
                hint=self.unpriced(model),
                response=response,
            )
        if (so_far.cost or 0.0) > self.max_cost:
            return BudgetExceeded(
                f"{self.label}: ${so_far.cost or 0.0:.6f} spent, "
                f"above {where}.max_cost_usd{self.per} {self.max_cost}",
                usage,
                hint=self.hint("max_cost_usd"),
                response=response,
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
    """The completion cap sent with the call, the room it holds (None: no limit, the
    model's and the caller's own settings hold)."""

    released: bool = False

    def release(self) -> None:
        """The call answered or failed: the room it held is free again (once: freed twice,
        later calls could spend past a limit)."""
        if self.released:
            return
        self.released = True
        for found in self.pools:
            found.release(self.tokens, self.cost)


def file_of(snapshot: Any, agent: str) -> str:
    """The file agent `agent` is declared in (`agents/bot.yaml`), for budget hints."""
    source = getattr(snapshot, "source", None)
    return source("agent", agent).path if source is not None else "fim.yaml"


def run_budgets(snapshot: Any, agent: Any) -> list[tuple[str, Budget]]:
    """The budgets that hold for a run of `agent`: its own, the project's, the key's."""
    return [
        (owner, budget)
        for owner, budget in (
            (f"agent '{agent.name}'", agent.budget),
            ("project", snapshot.project.budget),
            (KEY, snapshot.project.server.key_budget),
        )
        if budget is not None
    ]


async def estimated(
    model: str, prompt: int, answer: Message, cost: Callable[[Usage], float | None]
) -> Usage:
    """The usage of a call whose endpoint reported none (some self-hosted servers and
    gateways; a stream whose last chunk never came): fim's own count of the prompt (the
    admission's estimate) and of the answer, priced, so that a budget never takes such a
    call for free."""
    if model not in _UNREPORTED:
        _UNREPORTED.add(model)
        log.warning("model '%s' reported no token usage; its budgets count fim's estimate", model)
    usage = Usage(
        prompt_tokens=prompt, completion_tokens=await off_loop(count_message, answer, model)
    )
    return usage.model_copy(update={"cost": cost(usage)})


_UNREPORTED: set[str] = set()  # models logged as reporting no usage, once each

log = logging.getLogger("fim.spend")


def abandoned(exc: BaseException) -> bool:
    """Whether `exc` says fim gave up on a call the endpoint may have been generating: its
    own `timeout` passed (`fim.errors.Abandoned`, which both backends raise for it; a bare
    `TimeoutError` from elsewhere too). The provider bills what it generated, so the call
    counts the `max_tokens` it held, as a cancelled one does; a refused connection or an
    HTTP error answer counts its prompt only. A connect timeout counts as abandoned too:
    the backends do not tell it apart, and counting more fails closed."""
    return isinstance(exc, Abandoned | TimeoutError)
