"""The one masking policy: secret values never leave fim, in any encoding.

A secret is the value of a `${VAR}` read from the environment, a literal written under a
credential-looking key (`api_key: sk-...`, `password:`, an `Authorization` header), every
value of a declared `headers:` mapping that could be a credential (`header_secret`) and the
password inside a DSN (`postgresql://user:pw@host/db`). The loader records them
(`config_secrets`), the Snapshot holds them, and `Masker` replaces them with `***`.

Not secrets, on purpose: a value shorter than `MIN_SECRET` (4) characters, whatever its
source (masking `1`, `yes` or `abc` everywhere would turn ordinary text into noise, and a
value that short is guessed, not leaked); and a literal under `env:` whose name does not
look like a credential (`env: {SLACK_BOT: xoxb-...}`): write `${VAR}` or a credential-like
name (`SLACK_BOT_TOKEN`) for a value that must not be shown.

The forms of a secret, and how they are found fast, are in `forms`; the masker over a set
of secrets (text, JSON-like values, cuts, streams) in `masker`.

Why values, not text: masking serialised JSON misses a secret whose escaped form differs
from the raw one and can cut a document in half. `Masker.value` walks dicts, lists and
strings and masks each string, then the caller serialises.

Why mask before cutting: a text cut first and masked after keeps the part of a secret the
cut left, which no form matches any more. A model that pads what a service echoes slides the
cut along a key and reads all but its last characters. So a text that is shown in part is
masked whole, then cut (`Masker.head`, `Masker.tail`, never leaving part of a `***`), and
a piece at the cut that could be part of a secret is masked too (`Masker.edge`): the text
may have been cut before fim saw it (a body read up to a byte cap, a program's output kept
up to its first 10,000 bytes). Squeezing whitespace, joining lines or taking a first line
reshapes a text like a cut: a key or base64 wrapped over lines is found only in the text as
it was, so it is masked before that too.

Every exit of the process (store writes, HTTP responses, logs) masks with `known()`: the
union of the secrets of every snapshot this process has loaded, so a run still holding an
older snapshot, or a log line written outside any run, is covered too.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import unquote, unquote_plus, urlsplit

from fim.masking.forms import MASK, MIN_SECRET, encodings
from fim.masking.keys import (
    SECRET_KEY,
    URL_PASSWORD,
    masked_url,
    secret_key,
    url_query_secrets,
)
from fim.masking.masker import Masker, StreamMasker

M = TypeVar("M")


def mask_model(model: M, masker: Masker | None = None) -> M:
    """A pydantic model (an event, a record) with secrets masked in every string field;
    `masker` defaults to `known()`."""
    masker = known() if masker is None else masker
    if not masker:
        return model
    return type(model).model_validate(masker.value(model.model_dump()))  # type: ignore[attr-defined]


def mask_strings(value: Any, mask: Callable[[str], str], keys: bool = True) -> Any:
    """A copy of a JSON-like `value` with `mask` applied to every string and (unless `keys`
    is false: a schema's property names, which calls are matched by) dict key, for callers
    that hold a mask function rather than a Masker."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {
            (mask(k) if keys and isinstance(k, str) else k): mask_strings(v, mask, keys)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_strings(v, mask, keys) for v in value]
    return value


def mask_value(value: Any, mask: Callable[[str], str] | None = None) -> Any:
    """Tool arguments for the audit log and approvals: every non-empty value under a
    credential-looking key becomes `***` (the model may have copied a credential from a
    document, so fim never saw it as a secret), and `mask` (default: `known()`) runs on
    every other string."""
    text = mask if mask is not None else known().text
    if isinstance(value, Mapping):
        return {
            k: MASK if secret_key(k) and v not in (None, "") else mask_value(v, text)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_value(v, text) for v in value]
    if isinstance(value, str):
        return text(value)
    return value


# --------------------------------------------------------------------------- declarations


def config_secrets(data: Any, key: object = "") -> set[str]:
    """Secrets written into a parsed declaration: literals under credential-looking keys
    (`api_key: sk-...`, `headers: {Authorization: Bearer ...}`, `env: {GH_TOKEN: ...}`),
    the values of every `headers:` mapping that could be credentials (`header_secret`),
    and DSN passwords (`postgresql://app:pw@db/x`, `...?password=pw`, raw and URL-decoded).
    Templates (`{{ ... }}`) are not secrets."""
    found: set[str] = set()
    _collect_secrets(data, key, found)
    return {s for s in found if len(s) >= MIN_SECRET}


_MEDIA_TYPE = re.compile(
    r"(application|audio|font|image|message|model|multipart|text|video|\*)/[\w.+*-]+"
    r"(\s*;[^,]*)?",
    re.IGNORECASE,
)
"""One media type with its parameters (`application/vnd.github+json`, `text/*;q=0.5`)."""
_VERSION = re.compile(r"v?\d+([.-]\d+)*", re.IGNORECASE)
"""An API version or date (`X-GitHub-Api-Version: 2022-11-28`, `anthropic-version: 2023-06-01`,
`v2`)."""
_PLAIN_HEADER_VALUES = frozenset(
    {"true", "false", "none", "null", "close", "keep-alive", "no-cache", "no-store", "gzip"}
    | {"deflate", "identity", "chunked", "same-origin", "cors", "navigate"}
)
"""Header values HTTP itself spells (`Connection: keep-alive`, `Cache-Control: no-cache`)."""


def header_secret(value: str) -> bool:
    """Whether a value declared in a `headers:` mapping (a connector's, an action's, an MCP
    server's) is masked as a secret, whatever the header's name. A header the author set
    for a service is sent to it on every request, and a service may echo request headers
    back (a debugging endpoint, an error page): `X-Custom-Key` or Azure's
    `Ocp-Apim-Subscription-Key` escape the key-name heuristics (`secret_key`), yet their
    values are credentials. So every value is one, except those that plainly are not:
    shorter than `MIN_SECRET` (empty, `1`, `yes`), a template, a list of media types
    (`Accept: application/json`), a version or date (`2022-11-28`), or a word HTTP itself
    spells (`no-cache`, `true`). Those would otherwise turn every `true`, date and media
    type in what the model reads into `***`; none of them is a credential."""
    text = value.strip()
    if len(text) < MIN_SECRET or "{{" in text or text.lower() in _PLAIN_HEADER_VALUES:
        return False
    if _VERSION.fullmatch(text):
        return False
    return not all(_MEDIA_TYPE.fullmatch(part.strip()) for part in text.split(","))


def header_secrets(headers: Mapping[str, Any]) -> set[str]:
    """The secrets among a `headers:` mapping's values (`header_secret`), each with its
    credential alone when it has a scheme (`Token abc...` also gives `abc...`)."""
    found: set[str] = set()
    for value in headers.values():
        if isinstance(value, str) and header_secret(value):
            _add_credential(value, found)
    return {s for s in found if len(s) >= MIN_SECRET}


def _add_credential(value: str, found: set[str]) -> None:
    found.add(value)
    if " " in value:  # `Bearer sk-...`, `Basic dXNl...`: the credential alone too
        found.add(value.split(" ", 1)[1].strip())


@functools.lru_cache(maxsize=4096)
def _credential_key(key: str) -> bool:
    """Cached: a project repeats the same few hundred keys in every file."""
    return secret_key(key, declaration=True) and "session" not in key.lower()


def _collect_secrets(data: Any, key: object, found: set[str]) -> None:
    if isinstance(data, str):
        credential = isinstance(key, str) and _credential_key(key)
        if credential and "{{" not in data and len(data) >= MIN_SECRET:
            _add_credential(data, found)
        if "://" not in data:
            return
        if "?" in data:  # `postgresql://app@db/x?password=pw` (libpq reads it too)
            found |= {v for s in url_query_secrets(data) for v in (s, unquote_plus(s))}
        if "@" not in data:
            return
        for match in URL_PASSWORD.finditer(data):
            found |= {match.group(1), unquote(match.group(1))}
        try:
            password = urlsplit(data.strip()).password
        except ValueError:
            password = None
        if password:
            found |= {password, unquote(password)}
    elif isinstance(data, Mapping):
        if key == "headers":  # sent to a service, which may echo it: see `header_secret`
            found |= header_secrets(data)
        for k, v in data.items():
            _collect_secrets(v, k, found)
    elif isinstance(data, list | tuple):
        for v in data:
            _collect_secrets(v, key, found)


# --------------------------------------------------------------------------- process-wide

_lock = threading.Lock()
_known = Masker()
_logs_masked = False


def remember(secrets: Iterable[str]) -> None:
    """Add secrets to the process-wide set (never shrinks: a reload that drops a secret
    does not make it safe to print)."""
    global _known
    new = frozenset(s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET)
    if new <= _known.secrets:
        return
    with _lock:
        _known = _known.union(new)
        _mask_logs()


def known() -> Masker:
    """The masker of every secret this process has loaded."""
    return _known


def clipped(text: str, limit: int, what: str = "result") -> str:
    """`text` bounded near `limit` characters, the one way fim shortens a text it passes
    on (a tool result, a hook's reason or rewrite): head and tail kept, each masked before
    it is cut (`Masker.head`, `Masker.tail`), and a note in the middle that says how much
    went and that the writer should send less. A text within `limit` is returned as it is:
    the exits mask it."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    masker = _known
    head, tail = masker.head(text, keep)[0], masker.tail(text, keep)[0]
    return (
        f"{head}\n[... {len(text) - 2 * keep} characters of this {what} were cut; "
        f"ask for less ...]\n{tail}"
    )


def _mask_logs() -> None:
    """Mask every log record when it is made (message, arguments, traceback), whatever
    logger or handler it goes to."""
    global _logs_masked
    if _logs_masked:
        return
    _logs_masked = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        masker = _known
        if not masker:
            return record
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: the handler reports it, with our text masked
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = masker.text(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = masker.text(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = masker.text(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)


__all__ = [
    "MASK",
    "SECRET_KEY",
    "Masker",
    "StreamMasker",
    "config_secrets",
    "encodings",
    "header_secret",
    "header_secrets",
    "known",
    "mask_model",
    "mask_strings",
    "mask_value",
    "masked_url",
    "remember",
    "secret_key",
]
