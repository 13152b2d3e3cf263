"""Human approvals in the state store: a `confirm` hook's or a workflow `human` node's
request, pending until someone decides (any process, any replica) or it expires."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.masking import known, mask_value
from fim.processes import alive, this_process
from fim.store.engine import Database
from fim.store.owners import owned_by
from fim.store.records import Approval, ApprovalStatus
from fim.store.schema import table

if TYPE_CHECKING:
    from sqlalchemy import Connection


RESERVED = frozenset(
    {"run_id", "workflow", "node", "step", "call_id", "args_hmac", "hook", "waiter"}
)
"""Data keys that say what an approval decides on: the run, workflow and node a human
node's decision continues, the call a hook's approval allows (`fim.hooks.approval`). They
are written when the approval is created; a decision never sets them."""


class ReservedData(RunError):
    """A decision's `data` names a key the approval was created with (`RESERVED`, or any
    key already in its data): refused, not merged, so a decision can only ever act on
    what its approval is about. `field` is the key."""

    def __init__(self, approval_id: str, field: str) -> None:
        self.field = field
        super().__init__(
            f"data.{field} cannot be set by a decision: it is part of what approval "
            f"'{approval_id}' decides on",
            hint=f"leave '{field}' out: data is the answer, never what is asked (always "
            f"refused: {', '.join(sorted(RESERVED))}, and every key the approval holds)",
        )


def reserved_key(current: Approval, data: dict[str, Any] | None) -> str | None:
    """The first key of a decision's `data` that would change what `current` is about."""
    for key in data or {}:
        if key in RESERVED or key in current.data:
            return key
    return None


WAITED = frozenset({"tool", "elicitation"})
"""Kinds of approval a process waits on in memory (a hook, an MCP server's question): when
that process is gone nobody acts on a decision. A workflow's approval is durable instead:
whoever decides it resumes the run."""


def orphaned(approval: Approval) -> bool:
    """Whether `approval` is pending for a process that has ended (`fim.processes.alive`):
    nobody will act on a decision. A waiter elsewhere (a replica, a container with its own
    pids) cannot be checked from here; its approval expires at its deadline (and its
    process withdraws it when it stops waiting)."""
    waiter = approval.data.get("waiter")
    return approval.status == "pending" and isinstance(waiter, dict) and alive(waiter) is False


ABANDONED = "nobody: the run that asked stopped waiting"
"""`resolved_by` of an approval whose waiter stopped waiting or ended (`orphaned`)."""


def abandoned(approval: Approval) -> tuple[str, str] | None:
    """(message, hint) for deciding an approval nobody waits for any more (every surface
    words it so); None for any other approval."""
    if approval.resolved_by != ABANDONED:
        return None
    return (
        f"approval '{approval.id}' expired: the run that asked for it stopped waiting (it "
        "was cancelled or its process ended), so nobody would act on a decision",
        "run the agent again: it asks for a new approval",
    )


@dataclass(frozen=True)
class Resolution:
    """What one decision did. `approval` is the approval as it now is (None: unknown id);
    `changed` says whether *this* call decided it. Only the caller that changed it acts on
    the decision (answers 200, resumes the workflow, queues its job): two deciders that
    both saw it pending (a double click, a load balancer retrying on another replica) read
    the same status back afterwards, so the status alone cannot tell them apart."""

    approval: Approval | None
    changed: bool


def already_decided(approval: Approval) -> str:
    """How every surface words a decision that lost: what the approval already is, and
    who made it so (`approval already decided: denied by api:key:1a2b...`)."""
    return f"approval already decided: {approval.status} by {approval.resolved_by or 'unknown'}"


def _withdraw(conn: Connection, approval_id: str) -> None:
    approvals = table("approvals")
    conn.execute(
        approvals.update()
        .where(approvals.c.id == approval_id)
        .where(approvals.c.status == "pending")
        .values(status="expired", resolved_at=time.time(), resolved_by=ABANDONED)
    )


def _expire(conn: Connection) -> None:
    approvals = table("approvals")
    conn.execute(
        approvals.update()
        .where(approvals.c.status == "pending")
        .where(approvals.c.expires_at.is_not(None))
        .where(approvals.c.expires_at <= time.time())
        .values(status="expired", resolved_at=approvals.c.expires_at, resolved_by="timeout")
    )


def _approval(conn: Connection, approval_id: str) -> Approval | None:
    approvals = table("approvals")
    row = conn.execute(approvals.select().where(approvals.c.id == approval_id)).mappings()
    found = row.first()
    return Approval(**found) if found else None


class Approvals(Database):
    async def create_approval(
        self,
        run_id: str,
        agent: str,
        tool_name: str,
        args: dict[str, Any],
        reason: str,
        expires_at: float | None,
        kind: str = "tool",
        data: dict[str, Any] | None = None,
    ) -> str:
        """Store a pending approval and return its id (short, to type in a shell)."""
        approval_id = uuid.uuid4().hex[:12]
        if kind in WAITED:
            data = {**(data or {}), "waiter": this_process()}
        mask = known()
        args, reason, data = mask_value(args, mask.text), mask.text(reason), mask.value(data)
        insert = table("approvals").insert().values(
            id=approval_id, run_id=run_id, agent=agent, tool_name=tool_name, args=args,
            reason=reason, kind=kind, data=data or {}, status="pending",
            created_at=time.time(), expires_at=expires_at,
        )  # fmt: skip
        await self._tx(lambda c: c.execute(insert))
        return approval_id

    async def get_approval(self, approval_id: str) -> Approval | None:
        """The approval, reading as `expired` once its deadline has passed."""

        def work(conn: Connection) -> Approval | None:
            _expire(conn)
            found = _approval(conn, approval_id)
            if found is not None and orphaned(found):
                _withdraw(conn, approval_id)
                found = _approval(conn, approval_id)
            return found

        return await self._tx(work)

    async def withdraw_approval(self, approval_id: str) -> None:
        """The waiter stops waiting (its run was cancelled, or it failed): a pending
        approval expires now, so nobody decides a call that can no longer happen."""
        await self._tx(lambda conn: _withdraw(conn, approval_id))

    async def list_approvals(
        self,
        status: ApprovalStatus | None = "pending",
        *,
        agent: str | None = None,
        tool_name: str | None = None,
        limit: int = 200,
        owner: str | None = None,
    ) -> list[Approval]:
        """Approvals with this status (None: all), newest first; with `owner`, only those
        of runs that caller started (`fim.store.owners`)."""
        approvals = table("approvals")
        query = approvals.select().order_by(approvals.c.created_at.desc()).limit(limit)
        for column, value in (("status", status), ("agent", agent), ("tool_name", tool_name)):
            if value is not None:
                query = query.where(approvals.c[column] == value)
        if owner is not None:
            query = query.where(approvals.c.run_id.in_(owned_by(owner)))

        def work(conn: Connection) -> list[Approval]:
            _expire(conn)
            found = [Approval(**row) for row in conn.execute(query).mappings()]
            gone = [approval.id for approval in found if orphaned(approval)]
            if not gone:
                return found
            for approval_id in gone:
                _withdraw(conn, approval_id)
            return [Approval(**row) for row in conn.execute(query).mappings()]

        return await self._tx(work)

    async def resolve_approval(
        self,
        approval_id: str,
        approved: bool,
        by: str = "cli",
        data: dict[str, Any] | None = None,
    ) -> Approval | None:
        """`decide_approval`'s approval alone, for a caller that waits on its own approval
        (an eval's answerer, `fim run`'s prompt) and so has nobody to race with."""
        return (await self.decide_approval(approval_id, approved, by, data)).approval

    async def decide_approval(
        self,
        approval_id: str,
        approved: bool,
        by: str = "cli",
        data: dict[str, Any] | None = None,
    ) -> Resolution:
        """Approve or deny a *pending* approval; `data` is added to its data.

        The approval as it now is (unchanged when it was no longer pending, so the caller
        can say it had already expired or been decided; None for an unknown id), and
        whether this call decided it: one conditional `UPDATE ... WHERE status = 'pending'
        RETURNING`, so of two deciders racing on one approval (two replicas, two shells)
        exactly one changes it, in SQLite as in PostgreSQL, whatever each read before.
        ReservedData, with nothing decided, when `data` would replace a key the approval
        was created with: the caller's data was once merged over it, and a tenant named
        another tenant's run as the `run_id` its own decision went on to resume.
        """
        approvals = table("approvals")

        def work(conn: Connection) -> tuple[Resolution, str | None]:
            _expire(conn)
            current = _approval(conn, approval_id)
            if current is not None and orphaned(current):
                _withdraw(conn, approval_id)
                return Resolution(_approval(conn, approval_id), False), None
            if current is None or current.status != "pending":
                return Resolution(current, False), None
            field = reserved_key(current, data)
            if field is not None:  # returned, not raised: a raise rolls back the whole batch
                return Resolution(current, False), field
            update = (
                approvals.update()
                .where(approvals.c.id == approval_id)
                .where(approvals.c.status == "pending")
                .values(
                    status="approved" if approved else "denied",
                    resolved_at=time.time(),
                    resolved_by=by[:200],
                    data=known().value({**current.data, **(data or {})}),
                )
                .returning(*approvals.c)
            )
            row = conn.execute(update).mappings().first()
            if row is None:  # decided (or expired) by another process since the read above
                return Resolution(_approval(conn, approval_id), False), None
            return Resolution(Approval(**row), True), None

        resolution, refused = await self._tx(work)
        if refused is not None:
            raise ReservedData(approval_id, refused)
        return resolution

    async def consume_approval(self, approval_id: str) -> bool:
        """Mark an approved approval as used; False if it was not approved or already used.

        This makes one approval allow exactly one call, even when a restarted run and the
        original one both find it.
        """
        return await self._consume(approval_id, ("approved",))

    async def claim_decision(self, approval_id: str) -> bool:
        """Mark a decided human node's approval (approved, denied or expired) as acted on;
        False if it is still pending or another process already acted on it.

        A workflow continues past its human node whatever the decision (a denial fails the
        node, and `on_error: continue` runs the nodes after it), so exactly one resume may
        act on each decision, not only on an approval: two processes resuming the same run
        on one denial both ran the nodes after it (attack-17 #1).
        """
        return await self._consume(approval_id, ("approved", "denied", "expired"))

    async def claim_expiry(self, approval_id: str) -> bool:
        """`claim_decision` for the expirer (`fim.workflows.expiry`): only an approval
        that expired. One a human decided between the expirer's read and its claim is the
        resume's to act on (attack-29 #3: the expirer took an approval and cancelled the
        run the approver had just resumed)."""
        return await self._consume(approval_id, ("expired",))

    async def _consume(self, approval_id: str, statuses: tuple[str, ...]) -> bool:
        approvals = table("approvals")
        update = (
            approvals.update()
            .where(approvals.c.id == approval_id)
            .where(approvals.c.status.in_(statuses))
            .where(approvals.c.consumed_at.is_(None))
            .values(consumed_at=time.time())
        )
        return bool(await self._tx(lambda c: c.execute(update).rowcount))

    async def wait_approval(
        self, approval_id: str, timeout: float, poll: float = 0.25
    ) -> Approval | None:
        """Poll until the approval is decided or expires, or `timeout` seconds pass.

        Polling (not notifications) because the decision may come from another process on
        another machine; SQLite and PostgreSQL both serve it without extra moving parts.
        Whatever ends the wait before a decision (the timeout, the run cancelled, an
        error) withdraws the approval: a human is never asked to decide a call nobody will
        make (its waiter's process dying is caught by `orphaned` instead).
        """
        deadline = time.monotonic() + max(0.0, timeout)
        decided = False
        try:
            while True:
                approval = await self.get_approval(approval_id)
                if approval is None or approval.status != "pending":
                    decided = True
                    return approval
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return approval
                wait = poll
                if approval.expires_at is not None:
                    wait = min(wait, max(0.0, approval.expires_at - time.time()) + 0.005)
                await asyncio.sleep(min(wait, remaining))
        finally:
            if not decided:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.withdraw_approval(approval_id))
