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
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

ACCEPT_ENCODING = "gzip, deflate"
"""What fim asks servers for (httpx would offer zstd and br when their libraries load)."""

_GZIP = ("gzip", "x-gzip")


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


__all__ = ["ACCEPT_ENCODING", "BodyRefused", "read_body"]
