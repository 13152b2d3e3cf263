"""Which keys hold a credential, whatever their value's source (tool arguments, YAML,
headers), and where a URL keeps its password."""

from __future__ import annotations

import re

SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|pwd|token|secret|(api|operator)[_-]?keys?|authori[sz]ation|"
    r"credential|"
    r"(private|access|secret)[_-]?key|cookie|session[_-]?id|dsn|(^|[_-])auth($|[_-])",
    re.IGNORECASE,
)
"""A key whose value is a credential whatever its source (tool arguments, YAML, headers)."""

_CONFIG_KEY = re.compile(r"^keys?$", re.IGNORECASE)
"""In a declaration `key:` is a credential (`auth: {type: api_key, key: ...}`); in tool
arguments it is usually a cache or object key a human approving the call needs to see."""

_NOT_SECRET_KEY = re.compile(r"tokens$|tokens?_(budget|count|limit|used)$", re.IGNORECASE)
"""Counters that only share a word with credentials (`max_tokens`, `token_budget`)."""

URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:([^@\s/]+)@")


def secret_key(key: object, *, declaration: bool = False) -> bool:
    """Whether a value under `key` is a credential (`api_key`, `Authorization`, `DB_PASSWORD`);
    `declaration` adds the keys that are credentials only in YAML (`key:`)."""
    if not isinstance(key, str) or _NOT_SECRET_KEY.search(key):
        return False
    return bool(SECRET_KEY.search(key) or (declaration and _CONFIG_KEY.search(key)))
