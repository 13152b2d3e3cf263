"""A run's model calls holding their room in a state store other processes share.

Daily, session and key limits count the calls in flight of this process in its pools
(`fim.run.in_flight`); replicas, `--workers` and `fim worker` processes on one PostgreSQL
store would each spend the same room. So a call under such a limit also holds its room in
the store (`fim.store.holds`): one transaction checks what was recorded plus every
process's holds and takes its own, with the arithmetic of the pools (`Limit.room`). The
hold becomes the call's real count when it answers and goes once the run's usage row has
it. `fim.run.spend.MeteredModel` owns one per run.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from fim.run.in_flight import Pool
from fim.run.limits import WAIT_FOR_ROOM, BudgetExceeded, Limit, Ticket
from fim.types import Usage

Shared = list[tuple[Limit, Any, tuple[Any, ...]]]
"""The limits whose store other processes share: (limit, store, scope)."""


class SharedRoom:
    """The holds of one run's calls in the shared store."""

    def __init__(self) -> None:
        self.holds: dict[int, tuple[Any, str]] = {}
        """Calls in flight holding room, by their ticket's id: (store, call id)."""
        self.answered: list[tuple[Any, str]] = []
        """Those that answered: their holds go once the run's usage row is written."""

    async def take(
        self,
        shared: Shared,
        estimate: int,
        prompt_cost: float | None,
        per_1k: float | None,
        room: int,
        model: str,
        timeout: float | None,
        run_id: str | None = None,
    ) -> tuple[int, tuple[Any, str] | None, Pool | None, int]:
        """Hold a call's room in the shared store: the same arithmetic as the pools', over
        what the store recorded and every process's holds, checked and taken in one
        transaction. Returns the room held (at most `room`) and the call's hold, or, when
        the others' calls hold the room, the pool to wait on and how many calls hold it.
        Raises the limit's refusal when what was spent leaves no room. A hold lapses on
        its own after the model's `timeout` (a crashed process's)."""
        # deferred: the holds load only for a daily or session limit on PostgreSQL
        from fim.store import holds

        def decide(sums: list[holds.Sums]) -> tuple[Any, tuple[int, float] | None]:
            left_room, busy = room, None
            for (limit, _, _), found in zip(shared, sums, strict=True):
                cost = found.recorded_cost
                if found.final_cost:
                    cost = (cost or 0.0) + found.final_cost
                view = replace(
                    limit,
                    spent=Usage(
                        prompt_tokens=found.recorded_tokens + found.final_tokens, cost=cost
                    ),
                    pool=Pool(held_tokens=found.held_tokens, held_cost=found.held_cost),
                )
                spent_room, left = view.room(estimate, prompt_cost, per_1k)
                if spent_room < 1:
                    return view.refusal(model, estimate, prompt_cost), None
                if left < 1:
                    busy = busy or (limit.pool, found.calls)
                left_room = min(left_room, left)
            if busy is not None:
                return busy, None
            held = (prompt_cost or 0.0) + (left_room * per_1k / 1000 if per_1k else 0.0)
            return left_room, (estimate + left_room, held)

        store = shared[0][1]
        call = os.urandom(8).hex()
        ttl = (timeout or WAIT_FOR_ROOM) + holds.MARGIN
        scopes = [scope for _, _, scope in shared]
        answer = await holds.take(store, call, scopes, decide, ttl, run_id)
        if isinstance(answer, BudgetExceeded):
            raise answer
        if isinstance(answer, tuple):
            return room, None, answer[0], answer[1]
        return answer, (store, call), None, 0

    def answer(self, ticket: Ticket, usage: Usage, late: bool) -> None:
        """The call of `ticket` answered (or was cut) spending `usage`: its hold becomes
        that count, deleted once the run's usage row has it (`release`); a call answering
        after that (`late`) keeps it until its `late` row is written."""
        call = self.holds.pop(id(ticket), None)
        if call is not None:
            # deferred: the holds load only for a daily or session limit on PostgreSQL
            from fim.store import holds

            keep = holds.KEEP_LATE if late else holds.KEEP_ANSWERED
            holds.answered(call[0], call[1], usage.total_tokens, usage.cost or 0.0, keep, late)
            if not late:
                self.answered.append(call)

    def release(self) -> None:
        """The run's usage row is written: the holds of its answered calls go."""
        if self.answered:
            # deferred: the holds load only for a daily or session limit on PostgreSQL
            from fim.store import holds

            answered, self.answered = self.answered, []
            holds.release(answered[0][0], [call for _, call in answered])
