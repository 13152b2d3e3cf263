"""Masking of tool arguments before they are stored (audit log, approvals).

Two layers: values that came from `${VAR}` secrets are replaced wherever they appear
(`Snapshot.mask`), and values under keys that *look* secret (password, token, api_key ...)
are replaced even when fim never saw them as secrets, because the model may have copied a
credential from a document into an argument.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|token|secret|api[_-]?key|authori[sz]ation|credential|"
    r"private[_-]?key|cookie|session[_-]?id",
    re.IGNORECASE,
)
MASK = "***"


def _identity(text: str) -> str:
    return text


def mask_value(value: Any, mask: Callable[[str], str] = _identity) -> Any:
    """A copy of `value` (JSON-like) with secret-looking keys and secret values masked."""
    if isinstance(value, dict):
        return {
            k: MASK
            if isinstance(k, str) and SECRET_KEY.search(k) and v not in (None, "")
            else mask_value(v, mask)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_value(v, mask) for v in value]
    if isinstance(value, str):
        return mask(value)
    return value
