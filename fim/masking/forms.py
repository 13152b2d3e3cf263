"""The forms of a secret the masker replaces, and finding them in a text fast.

Why every encoding: a secret reaches an exit in the shape some code gave it. A model copies
it into a JSON string (`\\"` and `\\\\` escaped), a connector puts it in a query string
(`%2B`, `+` for a space), a tool base64-encodes a `user:password` pair for a Basic header.
The masker knows each secret's raw, JSON-escaped (once or twice, `\\/` too), HTML- and
XML-escaped, URL-encoded (`quote`, `quote_plus`, either hex case), Python-quoted (`repr`,
`ascii`: `\\'` and `\\x..` escapes, as `f"{value!r}"` writes them), hex (either case) and
base64 forms (standard and URL-safe, padded or not), and the lower-case and IDNA forms a
URL's host shows (`host_forms`); a substring of a base64 stream depends
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
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

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
WRAP_MIN = 16
"""Shortest line a window (`StreamMasker`, `Masker.head`) is sure to see a wrapped form
across: MIME wraps at 76, PEM at 64. A whole text is searched across breaks of any width."""
_GATES = 3
"""Characters of a form a text must hold before the form is looked for."""
BREAKS = re.compile(r"[\r\n]")


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
    forms |= host_forms(secret)
    return {f for f in forms if len(f) >= MIN_SECRET}


_HOST_TEXT = re.compile(r"[\w.-]+")
"""What a URL's host may hold (letters outside ASCII included: an IDNA name)."""


def host_forms(secret: str) -> set[str]:
    """The forms a URL shows `secret` in when it is a host or part of one: lower-cased
    (httpx, urllib and browsers lower-case a host: `http://${TENANT_TOKEN}.hook.example/`
    was shown, and so sent to the model, as `hosttok-...`, a form no other one matched;
    attack-65 F2) and, outside ASCII, IDNA-encoded (`xn--...`, whole labels only). Only
    for a secret a host could hold, so a key with `/`, `+` or `=` costs no form more."""
    if not _HOST_TEXT.fullmatch(secret):
        return set()
    lower = secret.lower()
    if lower.isascii():
        return {lower}
    try:
        return {lower, lower.encode("idna").decode("ascii")}
    except UnicodeError:  # a label IDNA refuses (too long, a character it does not map)
        return {lower}


class Forms:
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
            groups.setdefault(gate, []).append((i, "".join(more), may_wrap(form)))
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


def may_wrap(form: str) -> bool:
    """A form a program may wrap over lines: base64 (a secret's bodies, and a secret made of
    base64 characters, say a JWT). Hex is looked for on one line only: its characters are in
    most texts, so the lines of nearly every text would be joined to look for it."""
    return _WRAPPABLE.fullmatch(form) is not None and _HEX.fullmatch(form) is None


def without_breaks(text: str) -> str:
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
