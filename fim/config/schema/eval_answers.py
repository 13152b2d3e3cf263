"""How a case answers what nobody can answer in an eval: a `confirm` hook's request and
an MCP server's question (`EvalCase.approvals`, `EvalCase.elicitation`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from fim.config.schema.base import Strict, empty_list


class ApprovalAnswers(Strict):
    """Approve the calls to these tools, deny every other: `{approve: [save_note]}`."""

    approve: list[str] = Field(default_factory=empty_list)
    """Tools whose calls are approved, named as `fim run -v` shows them."""


class ElicitationAnswer(Strict):
    """Accept an MCP server's question with this content: `{accept: {confirm: true}}`."""

    accept: dict[str, Any]
    """The answer's fields, checked against the schema the server sent."""
