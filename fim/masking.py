"""The one masking policy: secret values never leave fim, in any encoding.

A secret is the value of a `${VAR}` read from the environment, a literal written under a
credential-looking key (`api_key: sk-...`, `password:`, an `Authorization` header) and the
password inside a DSN (`postgresql://user:pw@host/db`). The loader records them
(`config_secrets`), the Snapshot holds them, and `Masker` replaces them with `***`.

Why every encoding: a secret reaches an exit in the shape some code gave it. A model copies
it into a JSON string (`\\"` and `\\\\` escaped), a connector puts it in a query string
(`%2B`, `+` for a space), a tool base64-encodes a `user:password` pair for a Basic header.
The masker knows each secret's raw, JSON-escaped (once or twice, `\\/` too), HTML- and
XML-escaped, URL-encoded (`quote`, `quote_plus`, either hex case), Python-quoted (`repr`,
`ascii`: `\\'` and `\\x..` escapes, as `f"{value!r}"` writes them), hex (either case) and
base64 forms (standard and URL-safe, padded or not); a substring of a base64 stream depends
on where it starts, so the body of each of the three alignments is a form of its own.
Base64 is also found wrapped over lines (`\\n` or `\\r\\n` every 76 characters in MIME and
the `base64` CLI, every 64 in PEM): a text is searched for it with its line breaks taken
out, and a secret found across breaks is masked with the breaks it spans. Hex is found on
one line only (in either case).

Why fast: every text that leaves fim is masked, nearly all of it holds no secret, and each
form is a scan of the text. So a form is looked for only in a text that holds three of its
characters, its rarest ones of different kinds (ranked on fim's own code, docs and JSON):
each such test is one `memchr`, shared by the forms that have that character, and a text
that lacks one skips the form. Only a text that holds those of a base64 form has its line
breaks taken out. A short text with none of the forms' rarest characters returns after one
C loop.

Why values, not text: masking serialised JSON misses a secret whose escaped form differs
from the raw one and can cut a document in half. `Masker.value` walks dicts, lists and
strings and masks each string, then the caller serialises.

Why mask before cutting: a text cut first and masked after keeps the part of a secret the
cut left, which no form matches any more. A model that pads what a service echoes slides the
cut along a key and reads all but its last characters. So a text that is shown in part is
masked whole, then cut (`Masker.head`, `Masker.tail`), and a piece at the cut that could be
part of a secret is masked too (`Masker.edge`): the text may have been cut before fim saw it
(a body read up to a byte cap, a program's output kept up to its first 10,000 bytes).

Every exit of the process (store writes, HTTP responses, logs) masks with `known()`: the
union of the secrets of every snapshot this process has loaded, so a run still holding an
older snapshot, or a log line written outside any run, is covered too.
"""

from __future__ import annotations

import base64
import bisect
import functools
import html
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar
from urllib.parse import quote, quote_plus, unquote, urlsplit

M = TypeVar("M")

MASK = "***"
MIN_SECRET = 4
"""Shorter values are not masked: `yes` or `1` would turn ordinary text into noise."""
MIN_BASE64 = 6
"""Base64 bodies shorter than this are not forms of their own (too many false hits); nor is a
shorter form looked for across a line break."""

_RARITY = (
    "\t\r^Z&~!?%@XQ$J8V9<76zYKG+5W\\B3U4;HF|#D2q>MLjI*O1PC'R/NA0SET}{][x`kvbw=-yg:)(_.,fhumpcd"
    '\n"lianroste '
)
"""ASCII characters from the rarest to the most common in fim's own code, docs and JSON: a
form is looked for only in a text holding its rarest character (any other character, say
non-ASCII, counts as rarer still). The order only changes speed, never what is masked."""

_B64 = "A-Za-z0-9+/_-"
_WRAPPABLE = re.compile(f"[{_B64}]{{{MIN_BASE64},}}")
_HEX = re.compile("[0-9a-f]+|[0-9A-F]+")
_WRAP_MIN = 16
"""Shortest line a window (`StreamMasker`, `Masker.head`) is sure to see a wrapped form
across: MIME wraps at 76, PEM at 64. A whole text is searched across breaks of any width."""
_GATES = 3
"""Characters of a form a text must hold before the form is looked for."""
_BREAKS = re.compile(r"[\r\n]")

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

_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:([^@\s/]+)@")


def secret_key(key: object, *, declaration: bool = False) -> bool:
    """Whether a value under `key` is a credential (`api_key`, `Authorization`, `DB_PASSWORD`);
    `declaration` adds the keys that are credentials only in YAML (`key:`)."""
    if not isinstance(key, str) or _NOT_SECRET_KEY.search(key):
        return False
    return bool(SECRET_KEY.search(key) or (declaration and _CONFIG_KEY.search(key)))


# --------------------------------------------------------------------------- encodings


def _hex_lower(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def _base64_bodies(data: bytes) -> set[str]:
    """The characters of base64(x + data + y) that depend on `data` alone, for each of the
    three positions `data` can start at in a 3-byte group (standard and URL-safe)."""
    bodies = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode("ascii").rstrip("=")
        start = -(-8 * shift // 6)  # first character with no bit of the prefix
        end = 8 * (shift + len(data)) // 6  # last character with no bit of what follows
        body = encoded[start:end]
        if len(body) >= MIN_BASE64:
            bodies |= {body, body.replace("+", "-").replace("/", "_")}
    return bodies


def encodings(secret: str) -> set[str]:
    """Every form of `secret` the masker replaces (each at least MIN_SECRET long)."""
    forms = {secret}
    for ensure_ascii in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ensure_ascii)[1:-1]
        twice = json.dumps(escaped, ensure_ascii=ensure_ascii)[1:-1]
        forms |= {escaped, twice, escaped.replace("/", "\\/")}  # `\/`: PHP and friends
    text_escaped = html.escape(secret, quote=False)  # XML/HTML text
    forms |= {html.escape(secret), text_escaped, text_escaped.replace('"', "&quot;")}
    for encoded in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms |= {encoded, _hex_lower(encoded)}
    for python in (repr, ascii):  # `'` escaped only when the quoted text holds a `"` too
        forms |= {python(secret)[1:-1], python(secret + '"')[1:-2]}
    data = secret.encode("utf-8")
    forms |= {data.hex(), data.hex().upper()}
    forms |= _base64_bodies(data)
    return {f for f in forms if len(f) >= MIN_SECRET}


# --------------------------------------------------------------------------- masker


class _Forms:
    """Forms to find in a text, grouped by their rarest character (`_RARITY`): a group is
    looked at only when the text holds that character, which one `memchr` tells, and a form
    in it only when the text holds its other gates too (`_gates`)."""

    __slots__ = ("forms", "groups")

    def __init__(self, forms: Iterable[str]) -> None:
        self.forms = sorted(set(forms), key=lambda f: (-len(f), f))
        """Longest first, so a secret that contains another is masked whole."""
        groups: dict[str, list[tuple[int, str, bool]]] = {}
        for i, form in enumerate(self.forms):
            gate, *more = _gates(form)
            groups.setdefault(gate, []).append((i, "".join(more), _wrappable(form)))
        self.groups = [(gate, tuple(entries)) for gate, entries in groups.items()]
        """(rarest character, its forms: (index, their other gates, whether the form may be
        wrapped over lines))."""

    def find(self, text: str) -> tuple[list[int], list[int]]:
        """The forms that cannot be wrapped found in `text`, and the ones that can whose
        gates the text holds: the caller looks for those in the text with its line breaks
        taken out, which finds them on one line and wrapped alike (indexes, in no order)."""
        found: list[int] = []
        wrappable: list[int] = []
        held: dict[str, bool] = {}
        for gate, entries in self.groups:
            if gate not in text:
                continue
            forms = self.forms
            for i, more, wraps in entries:
                for char in more:
                    there = held.get(char)
                    if there is None:
                        there = held[char] = char in text
                    if not there:
                        break
                else:
                    if wraps:
                        wrappable.append(i)
                    elif forms[i] in text:
                        found.append(i)
        return found, wrappable


def _gates(form: str) -> list[str]:
    """`_GATES` characters of `form`: its rarest, then the rarest of each other kind it holds
    (upper-case letter, digit, lower-case letter, other), then the next rarest. A text that
    lacks a kind (a log without capitals, prose without digits) then skips the form."""
    chars = sorted(set(form), key=_RARITY.find)
    kinds: set[int] = set()
    gates: list[str] = []
    for char in chars:
        kind = char.isupper() + 2 * char.isdigit() + 4 * char.islower()
        if kind not in kinds:
            kinds.add(kind)
            gates.append(char)
    gates += [char for char in chars if char not in gates]
    return gates[:_GATES]


def _wrappable(form: str) -> bool:
    """A form a program may wrap over lines: base64 (a secret's bodies, and a secret made of
    base64 characters, say a JWT). Hex is looked for on one line only: its characters are in
    most texts, so the lines of nearly every text would be joined to look for it."""
    return _WRAPPABLE.fullmatch(form) is not None and _HEX.fullmatch(form) is None


def _unbroken(text: str) -> str:
    """`text` without its line breaks: a form wrapped over lines is whole in it. An ASCII
    text goes through bytes: deleting bytes costs half what deleting characters does, and
    the copies to bytes and back are `memcpy`s."""
    lf, cr = "\n" in text, "\r" in text
    if not (lf or cr):
        return text
    if not text.isascii():
        text = text.replace("\r", "") if cr else text
        return text.replace("\n", "") if lf else text
    data = text.encode("ascii")
    data = data.replace(b"\r", b"") if cr else data
    return (data.replace(b"\n", b"") if lf else data).decode("ascii")


class Masker:
    """Masks a fixed set of secrets in text and in JSON-like values. Callable on text, so
    it fits every `mask: Callable[[str], str]` parameter."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = frozenset(s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET)
        forms: set[str] = set()
        for secret in self.secrets:
            forms |= encodings(secret)
        forms.discard(MASK)
        self._text = _Forms(forms)
        self._forms = self._text.forms
        self._starred = [i for i, form in enumerate(self._forms) if "*" in form]
        """Forms a mask put in the text can complete: looked for again after one is."""
        self._longest = len(self._forms[0]) if self._forms else 0
        self._shortest = len(self._forms[-1]) if self._forms else 2**63
        """A text shorter than every form (most streamed tokens) holds none."""
        self._rarest = frozenset(gate for gate, _ in self._text.groups)
        """The rarest character of every form: a text with none of them holds no form."""
        self._reach = max(
            [self._longest]
            + [len(f) + 2 * (len(f) // _WRAP_MIN + 1) for f in self._forms if _wrappable(f)]
        )
        """The most characters one masked occurrence spans, a wrapped form with its line
        breaks (lines of `_WRAP_MIN` or more): a window this much wider than what it shows
        sees every secret that reaches into it."""
        self._json = _Forms(json.dumps(f)[1:-1] for f in self._forms)
        """Each form as `json.dumps` writes it inside a string: JSON escapes character by
        character, so a string holding a form dumps to text holding the form's escape."""
        self._spaced = any(" " in f for f in self._forms)
        """Whether a form holds a space: if none does, no secret continues past one."""

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def __call__(self, text: str) -> str:
        return self.text(text)

    def text(self, text: str) -> str:
        """`text` with every form of every secret replaced by `***`, a base64 form wrapped
        over lines too (with the line breaks it spans)."""
        if len(text) < self._shortest or (len(text) <= 64 and self._rarest.isdisjoint(text)):
            return text  # a short text (a token, a name) goes in one C loop, no group
        found, wrappable = self._text.find(text)
        wrapped: list[int] = []
        if wrappable:
            unbroken = _unbroken(text)
            wrapped = [i for i in wrappable if self._forms[i] in unbroken]
        if found or wrapped:
            for i in sorted({*found, *wrapped, *self._starred}):
                text = text.replace(self._forms[i], MASK)
        if wrapped and ("\n" in text or "\r" in text):
            text = self._unwrap(text, [self._forms[i] for i in wrapped])
        return text

    def _unwrap(self, text: str, forms: list[str]) -> str:
        """`text` with what is left of `forms` masked: the occurrences a line break cuts,
        found in the text without its breaks and masked with the breaks they span."""
        unbroken = _unbroken(text)
        spans: list[tuple[int, int]] = []
        for form in forms:
            at = unbroken.find(form)
            while at != -1:
                spans.append((at, at + len(form)))
                at = unbroken.find(form, at + len(form))
        if not spans:
            return text
        # the k-th break of `text` falls before character `gone[k]` of `unbroken`
        gone = [brk.start() - k for k, brk in enumerate(_BREAKS.finditer(text))]

        def in_text(j: int) -> int:
            return j + bisect.bisect_right(gone, j)

        pieces: list[str] = []
        done = 0
        for first, end in _merged(spans):
            pieces += [text[done : in_text(first)], MASK]
            done = in_text(end - 1) + 1
        return "".join([*pieces, text[done:]])

    def head(self, text: str, limit: int) -> tuple[str, int]:
        """The first `limit` characters of `text` as they may be shown, and how many
        characters were left out (0: all of it is shown). Masked, then cut, then a piece at
        the cut that could begin a secret masked too (`edge`). Only the part that can reach
        the head is masked (with room for the longest form), so cutting a megabyte costs
        what its head does; the count is of `text` as given. A text that needs no cut
        comes back as it is: the exits mask it, and the engine tells that it did."""
        if len(text) <= limit:
            return text, 0
        window = text[: limit + self._reach]
        masked = self.text(window)
        if len(window) == len(text) and len(masked) <= limit:
            return masked, 0  # nothing cut after all: the masks made it fit
        return self.edge(masked[:limit]), len(text) - limit

    def tail(self, text: str, limit: int) -> tuple[str, int]:
        """`head` from the end: the last `limit` characters, a piece at the cut that could
        end a secret masked."""
        if len(text) <= limit:
            return text, 0
        window = text[-(limit + self._reach) :]
        masked = self.text(window)
        if len(window) == len(text) and len(masked) <= limit:
            return masked, 0
        return self.edge(masked[-limit:], at="start"), len(text) - limit

    def edge(self, text: str, *, at: Literal["end", "start"] = "end") -> str:
        """`text`, cut from a longer text after its end (or before its start), with the
        longest piece at the cut that could be part of a form masked: at least MIN_SECRET
        characters that begin (or end) one. A cut the model can slide along a secret then
        shows at most MIN_SECRET - 1 of its characters, as `StreamMasker` holds back what
        could start one."""
        if not text or not self._forms:
            return text
        found = 0
        for form in self._forms:
            found = max(found, _overlap(text, form, at))
        if found == 0:
            return text
        return text[:-found] + MASK if at == "end" else MASK + text[found:]

    def contains(self, text: str) -> bool:
        """Whether any form of a secret occurs in `text` (wrapped over lines too)."""
        return bool(text) and self.text(text) != text

    def value(self, value: Any, *, keys: bool = False) -> Any:
        """A copy of a JSON-like `value` with secrets masked in every string (dict keys
        included). With `keys`, a string under a credential-looking key is masked whatever
        it holds (declarations shown to people: a literal `api_key` is still a key)."""
        if not self._forms and not keys:
            return value  # nothing to mask: no copy (a project without secrets pays nothing)
        if not keys and not self._may_hold_secret(value):
            return value  # no string in it holds a form: the walk would copy it unchanged
        return self._walk(value, keys, "")

    def _may_hold_secret(self, value: Any) -> bool:
        """False only when no string (dict keys included) in a JSON value holds a form: one
        `json.dumps` in C and a substring test per form instead of a Python walk over every
        node (a run record has ~200 strings, and nearly all records hold no secret). Values
        JSON cannot encode exactly (other types) are walked."""
        try:
            dumped = json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            return True
        found, wrappable = self._json.find(dumped)
        if found:
            return True
        if wrappable and ("\\n" in dumped or "\\r" in dumped):
            dumped = dumped.replace("\\r", "").replace("\\n", "")  # the breaks, escaped
        return any(self._json.forms[i] in dumped for i in wrappable)

    def _walk(self, value: Any, keys: bool, key: object) -> Any:
        if isinstance(value, str):
            if keys and value and secret_key(key, declaration=True):
                return MASK
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                (self.text(k) if isinstance(k, str) else k): self._walk(v, keys, k)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._walk(v, keys, key) for v in value]
        return value

    def union(self, other: Masker | Iterable[str]) -> Masker:
        extra = other.secrets if isinstance(other, Masker) else other
        return Masker(self.secrets | frozenset(extra))


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` (start, end) in order, overlapping ones joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(text: str, form: str, at: Literal["end", "start"]) -> int:
    """Length of the longest end of `text` that begins `form` (`at="end"`), or of the longest
    start of `text` that ends it (`at="start"`): at least MIN_SECRET and shorter than `form`
    (a whole form is `Masker.text`'s); 0 when there is none."""
    reach = len(form) - 1
    if at == "end":
        window = text[-reach:]
        seed = form[:MIN_SECRET]
        i = window.find(seed)
        while i != -1:  # the first hit is the longest piece
            if form.startswith(window[i:]):
                return len(window) - i
            i = window.find(seed, i + 1)
        return 0
    window = text[:reach]
    seed = form[-MIN_SECRET:]
    j = window.rfind(seed)
    while j != -1:  # the last hit is the longest piece
        if form.endswith(window[: j + MIN_SECRET]):
            return j + MIN_SECRET
        j = window.rfind(seed, 0, j + MIN_SECRET - 1)
    return 0


class StreamMasker:
    """Masks a text that arrives in pieces (streamed tokens): a secret split across two
    pieces is still caught, because the tail that could start a secret is held back until
    the next piece (or `flush`). That tail is what follows the last space when no form of
    a secret holds one (a secret does not continue past it), else the last `_reach` - 1
    characters: streamed prose comes out word by word, base64 waits for its block."""

    def __init__(self, masker: Masker) -> None:
        self.masker = masker
        self._held = ""
        self._hold = max(masker._reach - 1, 0)

    def feed(self, piece: str) -> str:
        if not self.masker:
            return piece
        text = self.masker.text(self._held + piece)
        keep = min(len(text), self._hold)
        if not self.masker._spaced and keep:
            space = text.rfind(" ", len(text) - keep)
            if space != -1:
                keep = len(text) - space - 1
        cut = len(text) - keep
        self._held = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        text, self._held = self.masker.text(self._held), ""
        return text

    def using(self, masker: Masker) -> StreamMasker:
        """This stream, masked from now on with `masker`, what it holds included: a process
        that learns a secret mid-stream (`remember`, so `known()` is a new masker) must not
        let out the part of it this stream held back before it knew."""
        stream = StreamMasker(masker)
        stream._held = self._held
        return stream


def mask_model(model: M, masker: Masker | None = None) -> M:
    """A pydantic model (an event, a record) with secrets masked in every string field;
    `masker` defaults to `known()`."""
    masker = known() if masker is None else masker
    if not masker:
        return model
    return type(model).model_validate(masker.value(model.model_dump()))  # type: ignore[attr-defined]


def mask_strings(value: Any, mask: Callable[[str], str]) -> Any:
    """A copy of a JSON-like `value` with `mask` applied to every string and dict key (for
    callers that hold a mask function rather than a Masker)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {
            (mask(k) if isinstance(k, str) else k): mask_strings(v, mask) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_strings(v, mask) for v in value]
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
    (`api_key: sk-...`, `headers: {Authorization: Bearer ...}`, `env: {GH_TOKEN: ...}`)
    and DSN passwords (`postgresql://app:pw@db/x`, raw and URL-decoded). Templates
    (`{{ ... }}`) are not secrets."""
    found: set[str] = set()
    _collect_secrets(data, key, found)
    return {s for s in found if len(s) >= MIN_SECRET}


@functools.lru_cache(maxsize=4096)
def _credential_key(key: str) -> bool:
    """Cached: a project repeats the same few hundred keys in every file."""
    return secret_key(key, declaration=True) and "session" not in key.lower()


def _collect_secrets(data: Any, key: object, found: set[str]) -> None:
    if isinstance(data, str):
        credential = isinstance(key, str) and _credential_key(key)
        if credential and "{{" not in data and len(data) >= MIN_SECRET:
            found.add(data)
            if " " in data:  # `Bearer sk-...`, `Basic dXNl...`: the credential alone too
                found.add(data.split(" ", 1)[1].strip())
        if "@" not in data or "://" not in data:
            return
        for match in _URL_PASSWORD.finditer(data):
            found |= {match.group(1), unquote(match.group(1))}
        try:
            password = urlsplit(data.strip()).password
        except ValueError:
            password = None
        if password:
            found |= {password, unquote(password)}
    elif isinstance(data, Mapping):
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
    "known",
    "mask_model",
    "mask_strings",
    "mask_value",
    "remember",
    "secret_key",
]
