"""Masking of tool arguments before they are stored (audit log, approvals): the policy
lives in `fim.masking`; this module keeps the hooks' import path."""

from __future__ import annotations

from fim.masking import MASK, SECRET_KEY, mask_value

__all__ = ["MASK", "SECRET_KEY", "mask_value"]
