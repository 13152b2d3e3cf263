"""A response body read up to a byte cap, decompressed by fim one bounded step at a time.

httpx decodes `Content-Encoding` inside `aiter_bytes()`, a network chunk at a time, so a cap
checked on what it yields comes too late: with `Content-Encoding: gzip, gzip` it stacks two
decoders and a 600-byte chunk came out as 256 MB before the first check (web_fetch read
1.8 KB off the wire and peaked at 2.1 GB of memory). Here the raw bytes are read
(`aiter_raw()`) and inflated by zlib with `max_length` set to what the cap leaves, so no step
makes more than the cap. Shared by `web_fetch` and the HTTP connectors (which sit a layer
above the builtin tools and may import them).

One content coding is decoded, gzip or deflate (what `ACCEPT_ENCODING` asks servers for;
zlib is in the standard library). A stack of codings, or one fim does not decode (br, zstd:
no library with a bounded step is a dependency), is refused with an error naming it, never
read undecoded or unbounded.

The bytes become text in `text_of`, with a web text encoding only (`codec_of`): httpx's
`response.encoding` is any codec Python's registry knows by the charset's name, and that
registry is not a list of text encodings (`charset=punycode` decoded 800 KB in 6 s on the
event loop, its cost worse than quadratic; `charset=rot13` raised LookupError out of the tool).
"""

from __future__ import annotations

import codecs
import functools
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

ACCEPT_ENCODING = "gzip, deflate"
"""What fim asks servers for (httpx would offer zstd and br when their libraries load)."""

_GZIP = ("gzip", "x-gzip")


_WEB_ENCODINGS = {
    label: codec
    for codec, labels in (
        # The WHATWG Encoding Standard's labels (encoding.spec.whatwg.org, "Names and
        # labels"), by the Python codec that decodes them: single-byte tables and CJK codecs, all
        # linear in C. Its "replacement" encodings, and a label it does not know, are read as
        # UTF-8 (`text_of`).
        ("utf-8", "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8"),
        ("cp866", "866 cp866 csibm866 ibm866"),
        (
            "iso8859-2",
            "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 "
            "iso_8859-2:1987 l2 latin2",
        ),
        (
            "iso8859-3",
            "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 "
            "iso_8859-3:1988 l3 latin3",
        ),
        (
            "iso8859-4",
            "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 "
            "iso_8859-4:1988 l4 latin4",
        ),
        (
            "iso8859-5",
            "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 "
            "iso_8859-5 iso_8859-5:1988",
        ),
        (
            "iso8859-6",
            "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 "
            "iso-8859-6 iso-8859-6-e iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 "
            "iso_8859-6:1987",
        ),
        (
            "iso8859-7",
            "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 "
            "iso8859-7 iso88597 iso_8859-7 iso_8859-7:1987 sun_eu_greek",
        ),
        (
            "iso8859-8",
            "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 "
            "iso8859-8 iso88598 iso_8859-8 iso_8859-8:1988 visual csiso88598i iso-8859-8-i "
            "logical",
        ),
        ("iso8859-10", "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6"),
        ("iso8859-13", "iso-8859-13 iso8859-13 iso885913"),
        ("iso8859-14", "iso-8859-14 iso8859-14 iso885914"),
        ("iso8859-15", "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9"),
        ("iso8859-16", "iso-8859-16"),
        ("koi8-r", "cskoi8r koi koi8 koi8-r koi8_r"),
        ("koi8-u", "koi8-ru koi8-u"),
        ("mac-roman", "csmacintosh mac macintosh x-mac-roman"),
        ("cp874", "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874"),
        ("cp1250", "cp1250 windows-1250 x-cp1250"),
        ("cp1251", "cp1251 windows-1251 x-cp1251"),
        (
            "cp1252",
            "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 "
            "iso-ir-100 iso8859-1 iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii "
            "windows-1252 x-cp1252",
        ),
        ("cp1253", "cp1253 windows-1253 x-cp1253"),
        (
            "cp1254",
            "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 "
            "iso_8859-9:1989 l5 latin5 windows-1254 x-cp1254",
        ),
        ("cp1255", "cp1255 windows-1255 x-cp1255"),
        ("cp1256", "cp1256 windows-1256 x-cp1256"),
        ("cp1257", "cp1257 windows-1257 x-cp1257"),
        ("cp1258", "cp1258 windows-1258 x-cp1258"),
        ("mac-cyrillic", "x-mac-cyrillic x-mac-ukrainian"),
        # the standard decodes GBK with its gb18030 decoder, Big5 with HKSCS, Shift_JIS as
        # Windows-31J and EUC-KR as Windows-949
        (
            "gb18030",
            "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk "
            "iso-ir-58 x-gbk gb18030",
        ),
        ("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5"),
        ("euc-jp", "cseucpkdfmtjapanese euc-jp x-euc-jp"),
        ("iso2022-jp", "csiso2022jp iso-2022-jp"),
        ("cp932", "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis"),
        (
            "cp949",
            "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 "
            "ks_c_5601-1989 ksc5601 ksc_5601 windows-949",
        ),
        ("utf-16-be", "unicodefffe utf-16be"),
        ("utf-16-le", "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le"),
        ("x-user-defined", "x-user-defined"),  # no Python codec: `_table` has it
    )
    for label in labels.split()
}
"""A web text encoding's label (as the standard lowercases it) -> the codec that reads it."""


_MULTI_BYTE = {"utf-8", "utf-16-be", "utf-16-le", "gb18030", "big5hkscs", "euc-jp"}
_MULTI_BYTE |= {"iso2022-jp", "cp932", "cp949"}
_SINGLE_BYTE = frozenset(_WEB_ENCODINGS.values()) - _MULTI_BYTE
"""Codecs of one character a byte, decoded through a table (`_table`)."""


def codec_of(response: httpx.Response) -> str:
    """The codec `response`'s body is read with: the web text encoding its `charset` names,
    UTF-8 for anything else (no charset, a label the standard does not know, or one of its
    "replacement" encodings). Never another codec of Python's registry: the server chooses
    the charset, and some codecs there are not text encodings or not linear in time."""
    label = (response.charset_encoding or "").strip("\t\n\f\r \"'").lower()
    return _WEB_ENCODINGS.get(label, "utf-8")


@functools.cache
def _table(codec: str) -> str:
    """A single-byte codec's 256 characters, a byte it leaves undefined read as U+FFFD:
    decoding through it never calls an error handler, which for 5 MB of undefined bytes
    took 2.8 s (`x-user-defined` gets the standard's own table: U+F780 + byte - 0x80)."""
    if codec == "x-user-defined":
        return "".join(chr(b if b < 0x80 else 0xF700 + b) for b in range(256))
    return bytes(range(256)).decode(codec, errors="replace")


def text_of(data: bytes, codec: str) -> str:
    """`data` as text in `codec` (from `codec_of`); bytes the encoding does not define
    become U+FFFD. Linear in the size of `data` for every codec `codec_of` names."""
    if codec in _SINGLE_BYTE:
        return codecs.charmap_decode(data, "strict", _table(codec))[0]
    return data.decode(codec, errors="replace")


class BodyRefused(Exception):
    """A body fim does not read; the message says why, for the model."""


class _Inflate:
    """One gzip or deflate stream. A `deflate` body is zlib-wrapped by the standard, raw
    deflate by some servers: the first chunk tells which (httpx decides the same way)."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._first = coding not in _GZIP
        wbits = zlib.MAX_WBITS | 16 if coding in _GZIP else zlib.MAX_WBITS
        self._inflater = zlib.decompressobj(wbits)

    def step(self, chunk: bytes, room: int) -> bytes:
        """At most `room` bytes inflated from `chunk`. Output shorter than `room` means all
        of `chunk` was used; output of `room` bytes means the cap is reached (the rest of
        the chunk is never inflated)."""
        first, self._first = self._first, False
        try:
            return self._inflater.decompress(chunk, room)
        except zlib.error as exc:
            if first:  # raw deflate, without the zlib header
                self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                return self.step(chunk, room)
            raise BodyRefused(f"the body is not valid {self._coding} data ({exc})") from None

    @property
    def done(self) -> bool:
        """The stream ended: anything after it is not part of the body."""
        return self._inflater.eof


def _inflater(response: httpx.Response) -> _Inflate | None:
    """The decoder of the response's one content coding (None: not encoded)."""
    codings = [
        c.strip().lower()
        for c in response.headers.get_list("content-encoding", split_commas=True)
        if c.strip() and c.strip().lower() != "identity"
    ]
    if len(codings) > 1:
        raise BodyRefused(
            f"the response is compressed {len(codings)} times over (Content-Encoding: "
            f"{', '.join(codings)}); fim decodes at most one content coding"
        )
    if not codings:
        return None
    if codings[0] not in (*_GZIP, "deflate"):
        raise BodyRefused(
            f"the response is compressed with '{codings[0]}', which fim does not decode "
            f"(it asks for {ACCEPT_ENCODING})"
        )
    return _Inflate(codings[0])


async def read_body(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of the response's decoded body, and whether it had more (the
    rest is not read). Raises BodyRefused for a coding fim does not decode or data that is
    not what its coding says. Compressed input is read up to twice `limit`: a stream that
    inflates to nearly nothing (empty deflate blocks) would otherwise be read forever."""
    inflate = _inflater(response)
    data = bytearray()
    wire = 0
    async for chunk in response.aiter_raw():
        room = limit + 1 - len(data)
        if inflate is None:
            data += chunk[:room]
        else:
            wire += len(chunk)
            data += inflate.step(chunk, room)
            if wire > 2 * limit:
                return bytes(data[:limit]), True
        if len(data) > limit:
            return bytes(data[:limit]), True
        if inflate is not None and inflate.done:
            break
    return bytes(data), False


__all__ = ["ACCEPT_ENCODING", "BodyRefused", "codec_of", "read_body", "text_of"]
