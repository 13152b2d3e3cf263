"""The records the state store returns: plain frozen dataclasses, no database types."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]


@dataclass(frozen=True)
class RunRecord:
    id: str
    kind: str
    name: str
    status: str
    data: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Approval:
    """A request for a human decision (a tool call, a workflow `human` node)."""

    id: str
    run_id: str
    agent: str
    tool_name: str
    args: dict[str, Any]
    reason: str
    kind: str
    data: dict[str, Any]
    status: ApprovalStatus
    created_at: float
    expires_at: float | None = None
    resolved_at: float | None = None
    resolved_by: str | None = None
    consumed_at: float | None = None
    """When a waiting caller acted on the approval, so one approval allows one call."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AuditEntry:
    id: int
    ts: float
    run_id: str
    agent: str
    tool: str
    args: dict[str, Any]
    outcome: str
    duration_ms: float | None = None
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
