"""Which keys hold a credential, whatever their value's source (tool arguments, YAML,
headers), and where a URL keeps its password."""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

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

_SCHEME = r"(?<![A-Za-z0-9+.-])"
"""Where a URL's scheme may start: not inside a run of scheme characters. Tried at every
position, a scheme of `[A-Za-z0-9+.-]*` rescanned the whole run each time: quadratic in a
long run before `://` (attack-47 F7: 2.4 s at 40 KB); each run is now scanned once."""

URL_PASSWORD = re.compile(
    _SCHEME + r"[A-Za-z0-9+.-]+://[^/\s:]*:((?:(?!://)[^@ \n\r\f\v])+(?:@[^@\s/?#]+)*)@"
)
"""A userinfo password in any text: after the user name (which may hold an `@`, Azure's
`user@server` login) and its first `:`, up to the last `@` before the host. It may hold a
`/` (base64 passwords: SQLAlchemy, fim's store, reads `u:a/b@host` as password `a/b`) or
a tab, not a `://` (a password never does; it keeps one attempt from scanning the next
URL, so the scan stays linear)."""

_USERINFO_PASSWORD = re.compile(
    _SCHEME + r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/]*:)(?P<password>[^@]*(?:@[^@/?#]*)*)@"
)
"""A URL's userinfo password, covering every reading of it: the user name runs to the
first `:` and may hold an `@` (SQLAlchemy's `make_url`: `fim@corp:pw@host` is user
`fim@corp`), the password runs to the last `@` before the host (`urlsplit`: `u:pa@ss@host`
has `pa@ss`) and keeps a `/` or `?` before its first `@` (SQLAlchemy reads it so)."""

_DSN_PAIR = re.compile(
    r"(?P<key>[A-Za-z_][\w.-]*)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s']\S*)"
)
"""One `key=value` of a libpq connection string (`host=db password='a b' dbname=app`)."""

URL_QUERY_PAIR = re.compile(r"(?:^|[?&])(?P<key>[^=&#\s]+)=(?P<value>[^&#\s]*)")
"""One `key=value` of a URL's query (`?password=...&sslmode=require`)."""


def secret_key(key: object, *, declaration: bool = False) -> bool:
    """Whether a value under `key` is a credential (`api_key`, `Authorization`, `DB_PASSWORD`);
    `declaration` adds the keys that are credentials only in YAML (`key:`)."""
    if not isinstance(key, str) or _NOT_SECRET_KEY.search(key):
        return False
    return bool(SECRET_KEY.search(key) or (declaration and _CONFIG_KEY.search(key)))


def url_query_secrets(url: str) -> list[str]:
    """The values a URL's query gives under credential keys, as written: libpq takes
    `?password=` and `?sslpassword=` as well as `user:password@` (attack-44 F3)."""
    _, sep, query = url.partition("?")
    if not sep:
        return []
    return [
        m["value"]
        for m in URL_QUERY_PAIR.finditer("?" + query)
        if m["value"] and secret_key(unquote_plus(m["key"]))
    ]


def masked_url(url: str) -> str:
    """`url` fit to show (banner, logs, errors, `/v1/status`): its userinfo password and the
    values of its credential-looking query keys (`password`, `sslpassword`, `passfile`,
    `token`, ...) become `***`; a libpq `key=value` string gets the same for its keys. The
    rest (scheme, host, database, other options) stays, as an operator needs it to tell
    which store is meant; the order and encoding are kept as written."""
    if "://" not in url:
        return _DSN_PAIR.sub(_masked_pair, url) if "=" in url else url
    head = ""
    found = _USERINFO_PASSWORD.match(url)
    if found is not None:
        head = found["head"] + ("***" if found["password"] else "") + "@"
        url = url[found.end() :]
    base, sep, query = url.partition("?")
    if not sep:
        return head + base
    pairs = [
        f"{key}=***" if secret_key(unquote_plus(key)) and value else pair
        for pair in query.split("&")
        for key, _, value in [pair.partition("=")]
    ]
    return head + base + "?" + "&".join(pairs)


def _masked_pair(m: re.Match[str]) -> str:
    if secret_key(m["key"]):
        return f"{m['key']}{m['eq']}***"
    return m[0]
