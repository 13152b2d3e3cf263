"""What a stored agent run was asked, and what it did, read back from its record or its
event log: `POST /v1/runs/{id}/rerun` and `fim runs rerun` run that input again,
`fim runs save-case` makes an eval case of it (newcomer-53 #7)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.masking.forms import MASK
from fim.store.live import read_batch, read_events

if TYPE_CHECKING:
    from fim.store import Store
    from fim.store.records import RunRecord


async def run_events(store: Store, record: RunRecord) -> list[dict[str, Any]]:
    """The run's events but tokens: those its record holds, else its event log's (a
    served run's are stored once, in the log)."""
    events = list(record.data.get("events") or [])
    if not events:
        events = [event for _seq, event in await read_events(store, record.id)]
    return [e for e in events if e.get("type") != "token"]


async def recorded_input(store: Store, record: RunRecord) -> str | None:
    """The input of the agent run `record` (its first `run_started` event's, masked as it
    was stored), or None when it has none (refused before it started)."""
    events = list(record.data.get("events") or [])
    if not events:  # the log's first batch: `run_started` is its first event
        events = [event for _seq, event in (await read_batch(store, record.id))[0]]
    for event in events:
        if event.get("type") == "run_started":
            return str(event.get("input") or "")
    return None


def masked_input(text: str) -> bool:
    """Whether the stored input `text` holds the mask (`***`): a secret in it was masked as
    it was stored, so running it again would send the mask, not what the run was asked
    (attack-61 F7). Every masked secret leaves the mask, so none is missed; an input that
    held `***` itself cannot be told apart and is refused too."""
    return MASK in text


__all__ = ["masked_input", "recorded_input", "run_events"]
