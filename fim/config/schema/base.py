"""The base of every declaration model: strict (unknown keys are errors) and frozen."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

JSONSchema = dict[str, Any]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
