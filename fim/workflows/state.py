"""The persisted state of one workflow run, and the writer that keeps the store current.

Everything a resume needs lives in this record (the declaration as it was when the run
started, the inputs, each node's status and output), so a run paused at a `human` node can
be picked up by another process after a restart, even if the files changed meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from fim.processes import alive, this_process

NodeStatus = Literal["pending", "running", "ok", "failed", "skipped", "waiting", "cancelled"]
RunStatus = Literal["running", "paused", "ok", "failed", "cancelled"]
KIND = "workflow"


@dataclass
class NodeState:
    type: str
    status: NodeStatus = "pending"
    output: Any = None
    error: str | None = None
    reason: str | None = None
    """Why a node was skipped."""
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    duration_ms: float | None = None
    approval_id: str | None = None
    """For a waiting `human` node: the pending approval that resumes it."""
    prompt: str | None = None


@dataclass
class RunState:
    run_id: str
    workflow: str
    decl: dict[str, Any]
    """The workflow declaration (pydantic dump, by alias) the run started with."""
    inputs: dict[str, Any]
    nodes: dict[str, NodeState]
    status: RunStatus = "running"
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    duration_ms: float | None = None
    depth: int = 0
    parents: list[str] = field(default_factory=list)
    snapshot_version: str = ""
    """The snapshot the run started on (its declaration stays that one's)."""
    resumed_on: list[str] = field(default_factory=list)
    """The snapshots it was resumed or recovered on after a reload, in order, each one
    that differs from the one before: the nodes after that point ran on it (their agents,
    models, hooks, connectors). Empty: every node ran on `snapshot_version`."""
    owner: dict[str, Any] = field(default_factory=dict)
    """The process driving the run (`fim.processes.this_process`): a `running` run whose
    owner is gone died mid-node and can be recovered."""
    queued: bool = False
    """Executed by `fim worker` jobs (fim.workflows.durable): procrastinate re-delivers it
    after a crash, and a decision on its human node queues a job instead of resuming in
    the process that received it."""
    seen_at: float = field(default=0.0, repr=False, compare=False)
    """When the record this state was read from was written (`updated_at`; never stored):
    taking the run over is conditional on it (`Runs.claim_run`)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy, cheap enough to take on every write.

        Shallow on purpose (`dataclasses.asdict` deep-copies and dominated the engine's
        cost): node states are copied, while values inside them (outputs, inputs, the
        declaration) are never mutated once set, so a store write running in a thread
        can serialise them safely while the run goes on.
        """
        data = dict(vars(self))
        del data["seen_at"]
        data["nodes"] = {node_id: dict(vars(ns)) for node_id, ns in self.nodes.items()}
        data["parents"] = list(self.parents)
        data["resumed_on"] = list(self.resumed_on)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """The state a record holds; keys that are not fields are left out (a background
        run's `queued` record carries `background: true`: reading it was a TypeError), and
        a record of a run that never started (no declaration, no inputs) reads as one."""
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values.setdefault("decl", {})
        values.setdefault("inputs", {})
        values["nodes"] = {k: NodeState(**v) for k, v in data.get("nodes", {}).items()}
        return cls(**values)


def current_owner() -> dict[str, Any]:
    """The process driving a run, as its record keeps it (`fim.processes.this_process`)."""
    return this_process()


def owner_alive(owner: dict[str, Any]) -> bool | None:
    """Whether the process that drives a run still exists: None where this process cannot
    tell (another host or container, or unrecorded) (`fim.processes.alive`)."""
    return alive(owner)


def orphaned(state: RunState) -> bool:
    """A run recorded as running whose process is known to be gone. A queued run never
    is: its job is procrastinate's to retry on another worker."""
    return state.status == "running" and not state.queued and owner_alive(state.owner) is False


def record_data(record: Any) -> dict[str, Any]:
    """The `data` dict of a store record, whatever mapping/object shape the store returns."""
    if record is None:
        return {}
    data = record.get("data") if isinstance(record, dict) else getattr(record, "data", None)
    if isinstance(data, str):
        data = json.loads(data)
    return data or {}


class Persister:
    """Writes the run state to the store without making nodes wait for the database.

    Node transitions only mark the state dirty; one background task writes the latest
    state whenever it changed, so a burst of 200 node completions costs a handful of writes,
    not 400. `flush()` writes synchronously at the points that must be durable (pause, end).
    """

    def __init__(self, store: Any, state: RunState) -> None:
        self._store = store
        self._state = state
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def mark(self) -> None:
        if self._closed:
            return
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while not self._closed:
            await self._dirty.wait()
            if self._closed:
                return
            await self.write()

    async def write(self) -> None:
        async with self._lock:
            self._dirty.clear()
            state = self._state
            await self._store.put_run(
                state.run_id, KIND, state.workflow, state.status, state.to_dict()
            )

    async def flush(self) -> None:
        """Write now and stop the background writer (the run ended or paused)."""
        self._closed = True
        if self._task is not None:
            # Not cancelled: a store write may be running in a thread, and a stale write
            # finishing after the final one would persist an old state.
            self._dirty.set()
            await self._task
            self._task = None
        await self.write()
