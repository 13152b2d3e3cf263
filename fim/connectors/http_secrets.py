"""The secrets of an HTTP connector: what its observations are masked with, the
credentials that go out only to its own origin, and the names no model argument may take.

Kept apart from sending and rendering so a reviewer can see in one place every value the
connector treats as a credential: a value missed here is echoed to the model by a service
that reflects request headers, or sent to whatever host a redirect names.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from collections.abc import Iterable, Mapping

from fim.config.schema import HttpAction, HttpConnector
from fim.masking import header_secret, header_secrets

_NOT_NAME = re.compile(r"[^0-9a-z]")


def secrets_of(decl: HttpConnector) -> list[str]:
    """What the connector's masker hides: every `auth:` value (and basic's encoded pair),
    and every value of its and its actions' `headers:` that could be a credential
    (`fim.masking.header_secret`): a service echoing request headers showed the model an
    `X-Custom-Key` written as a literal or a `${VAR:-default}`, whose name no rule knows."""
    found = sorted(header_secrets(decl.headers))
    for action in decl.actions.values():
        found += sorted(header_secrets(action.headers))
    auth = decl.auth
    if auth is None:
        return found
    values = {"bearer": ["token"], "api_key": ["key"], "basic": ["username", "password"]}
    found += [getattr(auth, field) for field in values[auth.type]]
    if auth.type == "basic":
        raw = f"{auth.username}:{auth.password}".encode()
        found.append(base64.b64encode(raw).decode())
    return [v for v in found if v]


def own_credentials(decl: HttpConnector) -> tuple[dict[str, str], dict[str, str]]:
    """The headers (`headers:` and the api key or bearer token) and query parameters (an
    api key `in: query`) a request to the connector's own origin carries, and no other.
    Basic auth is httpx's `BasicAuth`, handed to each request for the own origin. An empty
    key or token (`${OPEN_METEO_API_KEY:-}` unset: an API whose key is optional) is not
    sent: `apikey=` is no credential, and some services refuse it."""
    headers = dict(decl.headers)
    params: dict[str, str] = {}
    spec = decl.auth
    if spec is not None and spec.type == "bearer" and spec.token:
        headers["Authorization"] = f"Bearer {spec.token}"
    elif spec is not None and spec.type == "api_key" and spec.key:
        if spec.location == "header":
            headers[spec.name] = spec.key
        else:
            params[spec.name] = spec.key
    return headers, params


def _fold(text: str) -> str:
    """`text` NFKC-normalised and case-folded, each letter still outside ASCII then replaced
    by its upper or lower case when that is ASCII: casefold leaves the dotless i (U+0131) as
    it is, though `str.upper()` and .NET's OrdinalIgnoreCase read `ap\\u0131_key` as
    `API_KEY` (the long s U+017F and the Kelvin sign are folded by casefold and NFKC)."""
    out = []
    for char in unicodedata.normalize("NFKC", text).casefold():
        if not char.isascii():
            for other in (char.upper(), char.lower()):
                if (cased := unicodedata.normalize("NFKC", other).casefold()).isascii():
                    char = cased
                    break
        out.append(char)
    return "".join(out)


def _squeeze(folded: str) -> str:
    """A folded name without separators, brackets or any other character but [0-9a-z]."""
    return _NOT_NAME.sub("", folded) or folded.strip()


def _before_brackets(folded: str) -> str:
    """The name PHP, Rack and qs file `a[...]` under: what precedes the first `[` that a
    `]` closes (`api_key[0]`, `api_key[]`, `api_key[x][y]` are `api_key`); a `[` left open
    is a character of the name (PHP reads `api[key` as `api_key`)."""
    start = folded.find("[")
    return folded[:start] if start > 0 and "]" in folded[start:] else folded


def spelling(name: str) -> str:
    """A parameter or header name as servers may read it: NFKC, case-folded (`_fold`),
    cut before a bracketed suffix, without separators. `API_KEY`, `api-key`, `apiKey`,
    `api.key` (PHP reads it as `api_key`), `api_key[]`, `api_key[0]` (qs reads it and
    `api_key` as one list), `ap\\u0131_key` and `"api_key "` are all `apikey`: whichever of two
    look-alikes a server takes is its own business, so the connector compares them as one.
    `spellings` adds the other names a server may file it under."""
    return _squeeze(_before_brackets(_fold(name)))


def folded_top(name: str) -> str:
    """The top-level name PHP files `name` under, folded (`_fold`): what precedes its
    brackets, leading spaces dropped, each `.` and space an `_` (`.method` is `_method`)."""
    base = _before_brackets(_fold(name)).lstrip()
    return base.replace(".", "_").replace(" ", "_")


def _parts(name: str) -> set[str]:
    """Every name, folded but not yet squeezed, a server may read `name` as: the name
    before its brackets, the whole name, each bracketed or dotted part (`auth[api_key]`;
    qs with `allowDots` reads `api_key.0` as `api_key[0]` and `auth.api_key` as
    `auth[api_key]`) and each dotted prefix (`api_key.0`)."""
    folded = _fold(name)
    base = _before_brackets(folded)
    dotted = base.split(".")
    parts = [base, folded, *re.split(r"[\[\].]", folded)]
    parts += [".".join(dotted[:n]) for n in range(1, len(dotted))]
    return {part for part in parts if part.strip()}


def spellings(name: str) -> set[str]:
    """Every `spelling` a server may read `name` as (`_parts`)."""
    return {_squeeze(part) for part in _parts(name)}


def _alike(part: str, spelled: str) -> bool:
    """Whether `part`, a name that still holds letters or digits outside ASCII after `_fold`
    (a Cyrillic a U+0430, an accented a), may be the credential `spelled` with each of them
    read as a look-alike of the ASCII letter or digit in its place: fim keeps no table of
    look-alikes, so such a name is refused when it could be one (fail closed). Compared
    character by character: no pattern is built from a model's text."""
    kept = [char for char in part if char.isalnum()]
    if len(kept) != len(spelled) or all(char.isascii() for char in kept):
        return False
    pairs = zip(kept, spelled, strict=True)
    return all(char == want if char.isascii() else want.isalnum() for char, want in pairs)


def credential_names(
    decl: HttpConnector, action: HttpAction
) -> tuple[dict[str, str], dict[str, str]]:
    """The names a model argument may not take, by `spelling`, each with its declared
    spelling: those the query may not carry, and those a body (JSON, form or multipart
    fields) may not carry.

    The query may carry none of the connector's credentials: the api key's name (in the
    header or the query: many APIs read either), `Authorization` for bearer and basic,
    `access_token` for bearer (RFC 6750 lets a server take the token from the query or a
    form body), and every `headers:` entry of the connector or the action whose value is a
    credential (`fim.masking.header_secret`; GitLab reads `PRIVATE-TOKEN` as a header and
    `private_token` as a parameter). A body may not carry the names a server reads from
    the query too (Rails' `params` and PHP's `$_REQUEST` merge the body over the query):
    the api key `in: query` and `access_token`. A credential sent twice is answered by
    whichever the server prefers, the model's for some, so a call naming one is refused,
    declared parameter or not: an imported spec may list the key as a parameter."""
    query: dict[str, str] = {}
    body: dict[str, str] = {}
    spec = decl.auth
    if spec is not None and spec.type == "api_key":
        query[spelling(spec.name)] = spec.name
        if spec.location == "query":
            body[spelling(spec.name)] = spec.name
    elif spec is not None:
        query[spelling("Authorization")] = "Authorization"
        if spec.type == "bearer":
            for where in (query, body):
                where[spelling("access_token")] = "access_token"
    for headers in (decl.headers, action.headers):
        for name, value in headers.items():
            if header_secret(value):
                query.setdefault(spelling(name), name)
    return query, body


def clashes(names: Iterable[str], reserved: Mapping[str, str]) -> list[str]:
    """The `names` that are, by any of their `spellings`, one of `reserved` (or, spelled
    with letters outside ASCII, may stand for one: `_alike`), each said with the
    credential it stands for when spelled otherwise."""
    found = []
    for name in names:
        credential = _reserved_as(name, reserved)
        if credential is not None:
            found.append(repr(name) if name == credential else f"{name!r} (as {credential!r})")
    return found


def _reserved_as(name: str, reserved: Mapping[str, str]) -> str | None:
    """The credential of `reserved` that `name` may be read as (`clashes`), if any."""
    for part in sorted(_parts(name)):
        credential = reserved.get(_squeeze(part))
        if credential is not None:
            return credential
        alike = [k for k in sorted(reserved) if _alike(part, k)]
        if alike:
            return reserved[alike[0]]
    return None
