"""`Masker`: a fixed set of secrets replaced by `***` in text and in JSON-like values, in
a text shown in part (`head`, `tail`, `edge`) and in a text that arrives in pieces
(`StreamMasker`). Which forms of a secret it looks for, and how it finds them fast, is
`fim.masking.forms`; which values are secrets, and the process-wide set, is `fim.masking`.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from fim.masking.forms import (
    BREAKS,
    MASK,
    MIN_SECRET,
    WRAP_MIN,
    Forms,
    encodings,
    may_wrap,
    without_breaks,
)
from fim.masking.keys import secret_key


class Masker:
    """Masks a fixed set of secrets in text and in JSON-like values. Callable on text, so
    it fits every `mask: Callable[[str], str]` parameter."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = frozenset(s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET)
        forms: set[str] = set()
        for secret in self.secrets:
            forms |= encodings(secret)
        forms.discard(MASK)
        self._text = Forms(forms)
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
            + [len(f) + 2 * (len(f) // WRAP_MIN + 1) for f in self._forms if may_wrap(f)]
        )
        """The most characters one masked occurrence spans, a wrapped form with its line
        breaks (lines of `WRAP_MIN` or more): a window this much wider than what it shows
        sees every secret that reaches into it."""
        self._json = Forms(json.dumps(f)[1:-1] for f in self._forms)
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
            unbroken = without_breaks(text)
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
        unbroken = without_breaks(text)
        spans: list[tuple[int, int]] = []
        for form in forms:
            at = unbroken.find(form)
            while at != -1:
                spans.append((at, at + len(form)))
                at = unbroken.find(form, at + len(form))
        if not spans:
            return text
        # the k-th break of `text` falls before character `gone[k]` of `unbroken`
        gone = [brk.start() - k for k, brk in enumerate(BREAKS.finditer(text))]

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
        the cut that could begin a secret masked too (`edge`); a cut that falls inside a
        `***` drops the whole mask, so a shown text never ends in part of one. The one
        helper for every exit that shows a text in part: cut first and masked after, a
        text keeps the piece of a secret the cut left, which no form matches. Only the part
        that can reach the head is masked (with room for the longest form), so cutting a
        megabyte costs what its head does; the count is of `text` as given. A text that
        needs no cut comes back as it is: the exits mask it, and the engine tells that it
        did."""
        if len(text) <= limit:
            return text, 0
        window = text[: limit + self._reach]
        masked = self.text(window)
        if len(window) == len(text) and len(masked) <= limit:
            return masked, 0  # nothing cut after all: the masks made it fit
        end = limit
        spans = masked.find(MASK, max(limit - len(MASK) + 1, 0), limit + len(MASK) - 1)
        if -1 < spans < limit:
            end = spans  # the cut falls inside a mask: the whole mask goes, not a `*`
        return self.edge(masked[:end]), len(text) - limit

    def tail(self, text: str, limit: int) -> tuple[str, int]:
        """`head` from the end: the last `limit` characters, a piece at the cut that could
        end a secret masked."""
        if len(text) <= limit:
            return text, 0
        window = text[-(limit + self._reach) :]
        masked = self.text(window)
        if len(window) == len(text) and len(masked) <= limit:
            return masked, 0
        start = len(masked) - limit
        spans = masked.find(MASK, max(start - len(MASK) + 1, 0), start + len(MASK) - 1)
        if -1 < spans < start:
            start = spans + len(MASK)  # the cut falls inside a mask: the whole mask goes
        return self.edge(masked[start:], at="start"), len(text) - limit

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
