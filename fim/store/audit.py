"""The audit log in the state store: one row per tool call the `audit_log` hook saw."""

from __future__ import annotations

import time
from typing import Any

from fim.masking import known, mask_value
from fim.store.engine import Database
from fim.store.records import AuditEntry
from fim.store.schema import table


class Audit(Database):
    async def audit(self, entry: dict[str, Any]) -> None:
        """Append one audit entry (keys: run_id, agent, tool, args, outcome, duration_ms,
        detail, ts). Masked again here (values under credential-looking keys too)."""
        mask = known()
        entry = {**entry, "args": mask_value(entry.get("args") or {}, mask.text)}
        entry["detail"] = mask.text(entry["detail"]) if entry.get("detail") else None
        insert = (
            table("audit")
            .insert()
            .values(
                ts=float(entry.get("ts") or time.time()),
                run_id=str(entry.get("run_id", "")),
                agent=str(entry.get("agent", "")),
                tool=str(entry.get("tool", "")),
                args=entry.get("args") or {},
                outcome=str(entry.get("outcome", "")),
                duration_ms=entry.get("duration_ms"),
                detail=entry.get("detail"),
            )
        )
        await self._tx(lambda c: c.execute(insert))

    async def list_audit(
        self, limit: int = 100, *, run_id: str | None = None, agent: str | None = None
    ) -> list[AuditEntry]:
        """Newest first."""
        audit = table("audit")
        query = audit.select().order_by(audit.c.id.desc()).limit(limit)
        if run_id is not None:
            query = query.where(audit.c.run_id == run_id)
        if agent is not None:
            query = query.where(audit.c.agent == agent)
        rows = await self._read(lambda c: list(c.execute(query).mappings()))
        return [AuditEntry(**row) for row in rows]
