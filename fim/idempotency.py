"""Idempotency keys of side-effecting workflow nodes (docs/scale-out.md, "At least once").

A queued workflow run is procrastinate's to re-deliver: a worker killed after a node's side
effect but before its result was recorded runs the node again on another worker. The node
then carries the same key as the first time — derived from the run id and the node id only,
never from the attempt, the worker or the clock — so the far side can recognise the repeat:
HTTP connectors send it as `Idempotency-Key` on every request that is not a GET/HEAD/OPTIONS,
and a tool of the embedding application reads it with `current_key()`.

The key lives in a context variable set around the node's one tool call, so it reaches the
connector through the tool layers without a parameter on every signature, and never leaks
into another node's or another run's call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_KEY: ContextVar[str | None] = ContextVar("fim_idempotency_key", default=None)

HEADER = "Idempotency-Key"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Requests that change nothing: no key is sent with them."""


def idempotency_key(run_id: str, node_id: str) -> str:
    """The same on every attempt of one node of one run; different across runs and nodes."""
    return hashlib.sha256(f"{run_id}\x00{node_id}".encode()).hexdigest()[:32]


def current_key() -> str | None:
    """The key of the node whose call is running now (None outside a workflow node)."""
    return _KEY.get()


@contextmanager
def idempotent(key: str | None) -> Iterator[None]:
    """Calls made inside carry `key`."""
    token = _KEY.set(key)
    try:
        yield
    finally:
        _KEY.reset(token)
