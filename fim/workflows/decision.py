"""The human decision a workflow paused at a human node resumes with.

The decision lives on the node's approval in the state store: given with the resume
(`--approve`/`--deny`, its input checked against the node's `input_schema`) or already
recorded (`fim approvals`, the HTTP API). Either way the decision is claimed once, whatever
it is (approved, denied, expired), so two processes resuming the same run cannot both
continue it: a denied node with `on_error: continue` runs the nodes after it too. Kept
apart from `fim.workflows.engine`, which continues the run once the decision is known.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.config.problems import suggest
from fim.config.schema import WorkflowDecl
from fim.errors import RunError
from fim.schema_check import problems as schema_problems
from fim.store.approvals import already_decided

if TYPE_CHECKING:
    from fim.store import Store
    from fim.store.records import Approval


async def decide(
    store: Store,
    decl: WorkflowDecl,
    run_id: str,
    node_id: str,
    approval_id: str | None,
    approved: bool | None,
    data: dict[str, Any] | None,
    by: str,
) -> tuple[Approval, dict[str, Any]]:
    """The approval of `node_id`, resolved and consumed, and the data it resumes with.

    `approved=None` takes the decision already recorded on the approval; a decision given
    that contradicts the recorded one, a pending approval without one, or input the node's
    schema refuses is a RunError, as is a decision another process made first (this
    call's own then changed nothing) or a run another process already resumed on it."""
    approval = await store.get_approval(approval_id or "")
    if approval is None:
        raise RunError(f"the approval of node '{node_id}' is missing from the state store")
    given = dict(data or {})
    if approval.status == "pending":
        if approved is None:
            raise RunError(
                f"node '{node_id}' is still waiting for a decision",
                hint="pass --approve or --deny (and --input k=v for data)",
            )
        schema = getattr(decl.nodes[node_id], "input_schema", None)
        if approved and schema:
            problems = schema_problems(given, schema)
            if problems:
                problems = [*_unknown(given, schema), *problems]
                raise RunError(
                    f"invalid input for node '{node_id}': {'; '.join(problems)}",
                    hint=f"the node accepts: {schema}",
                )
        resolution = await store.decide_approval(approval.id, approved, by=by, data=given)
        if resolution.approval is None:  # deleted between the read above and this write
            raise RunError(f"the approval of node '{node_id}' vanished from the state store")
        if not resolution.changed:  # another decider got there between our read and write:
            # its decision is not ours to carry out (it resumes the run itself)
            raise RunError(
                already_decided(resolution.approval),
                hint=f"`fim workflow show {run_id}` shows where the run is now",
            )
        approval = resolution.approval
    elif approved is not None and (approval.status == "approved") != approved:
        raise RunError(
            f"node '{node_id}' was already {approval.status} by {approval.resolved_by}",
            hint="resume without --approve/--deny to continue with that decision",
        )
    if not await store.claim_decision(approval.id):
        raise RunError(
            f"run '{run_id}' was already resumed at '{node_id}' by another process",
            hint=f"`fim workflow show {run_id}` shows where it is now",
        )
    base = {"workflow", "run_id", "node"}
    if not given:
        given = {k: v for k, v in (approval.data or {}).items() if k not in base}
    return approval, given


def _unknown(given: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The given fields the schema does not name, each with a did-you-mean: a typo'd
    `--input nots=hi` was reported only as the `note` it left missing."""
    fields = schema.get("properties")
    if not isinstance(fields, dict) or not fields:
        return []
    found = []
    for key in given:
        if key not in fields:
            hint = suggest(key, fields, "fields")
            found.append(f"unknown input '{key}'" + (f" ({hint})" if hint else ""))
    return found
