"""A connector's response turned into the model's observation, masked before anything is cut.

On the event loop for a small body; a body over `IN_LOOP_BYTES` is decoded, parsed and
rendered in a killable worker (`fim.tools.isolate`): 8 MiB of tiny JSON arrays took 3 s of
the event loop, every run of the server waiting. `_observed` and `Fetched` go to the worker
by qualified name (pickle), so they stay module-level here and this module stays light to
import: the worker loads it on its first large body. A JSON document nested deeper than the
parser follows is an error observation.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic_core

from fim.connectors.render import render_json, truncate_text
from fim.locks import slots
from fim.masking import Masker
from fim.tools.builtin._body import text_of
from fim.types import ToolResult

_ERROR_EXCERPT = 1000
IN_LOOP_BYTES = 256 * 1024
"""A body up to this size is rendered on the event loop (a few ms at most; a worker's round
trip costs more than that); a larger one in a worker, killed past `RENDER_SECONDS`."""
RENDER_SECONDS = 10.0
"""How long the worker may take to read a large body (8 MiB of JSON: about 3 s)."""
RENDER_MEMORY = 512 * 1024 * 1024
"""Address space of the worker reading a large body: 8 MiB of tiny JSON values are
Python objects of about 250 MB. Past it the body is shown as text."""
PARTY_SLOTS = 2
"""Workers one connector's large bodies may hold at once: the rest wait for each other."""


@dataclass
class Fetched:
    """A response as read: its body's bytes, decoded only where it is rendered."""

    status: int
    reason: str
    content_type: str
    body: bytes
    codec: str
    """What the body is read with (`fim.tools.builtin._body.codec_of`)."""
    cut: bool
    cap: int
    """Bytes of the body read at most (`fim.connectors.http_fetch.MAX_BODY_BYTES`), for
    the note after a body `cut` there."""

    @functools.cached_property
    def text(self) -> str:
        return text_of(self.body, self.codec)


async def observe(
    party: str, fetched: Fetched, limit: int, masker: Masker, mask: Callable[[str], str]
) -> ToolResult:
    """The observation of a response, masked by `masker` before anything of it is cut
    (`_observed`) and by `mask` (the connector's) after: on the event loop for a small body,
    in a killable worker for a large one, `party` (the connector) holding at most
    `PARTY_SLOTS` workers."""
    meta = {"status": fetched.status}
    if len(fetched.body) <= IN_LOOP_BYTES:
        content, is_error = _observed(fetched, limit, masker)
        return ToolResult(content=mask(content), is_error=is_error, metadata=meta)
    # deferred: loading fim.tools.isolate costs a few ms
    from fim.tools import isolate

    try:
        async with slots(("isolate", "connector", party), PARTY_SLOTS):
            content, is_error = await isolate.call(
                _observed,
                fetched,
                limit,
                masker,
                timeout=RENDER_SECONDS,
                memory=RENDER_MEMORY,
            )
    except isolate.Stopped as exc:
        return ToolResult(
            content=f"Error: [HTTP {fetched.status}] the response ({len(fetched.body)} "
            f"bytes) is too costly to read: {exc}. Ask for less data.",
            is_error=True,
            metadata=meta,
        )
    return ToolResult(content=mask(content), is_error=is_error, metadata=meta)


def _observed(fetched: Fetched, limit: int, masker: Masker) -> tuple[str, bool]:
    """The text of a response's observation and whether it is an error, masked by `masker`
    before anything is cut. Module-level: a large body is read in a worker process."""
    status = fetched.status
    if status >= 400:
        excerpt = _shown(_body_text(fetched), _ERROR_EXCERPT, masker, fetched.cut)
        hint = _status_hint(status)
        return f"[HTTP {status}] {excerpt}".rstrip() + (f"\n{hint}" if hint else ""), True
    if not fetched.text:
        return f"[HTTP {status}] (empty response)", False
    data = _json_body(fetched)
    if data is _TOO_DEEP:
        return (
            f"Error: [HTTP {status}] the response is JSON nested too deeply to read (its "
            "nesting is past the JSON parser's limit). Ask for less data or a flatter "
            "representation.",
            True,
        )
    if data is not _NOT_JSON:
        return render_json(data, limit, masker), False
    text = _shown(fetched.text, limit, masker, fetched.cut)
    if fetched.cut and len(fetched.text) <= limit:
        text += f"\n... [response larger than {fetched.cap} bytes; the rest was not read]"
    return text, False


def _shown(text: str, limit: int, masker: Masker, cut: bool) -> str:
    """`text` masked and cut to `limit` (`truncate_text`); a body the byte cap cut ends in
    a cut of its own, whose edge is masked too when it is shown."""
    shown = truncate_text(text, limit, masker)
    return masker.edge(shown) if cut and len(text) <= limit else shown


_NOT_JSON = object()
_TOO_DEEP = object()


def _json_body(fetched: Fetched) -> Any:
    """The parsed body, `_NOT_JSON`, or `_TOO_DEEP`: pydantic-core's parser (as for the
    server's request bodies) stops at its own nesting limit without Python recursion,
    where `json.loads` raised RecursionError out of the call on 100,000 nested arrays."""
    if fetched.cut:
        return _NOT_JSON  # a cut document cannot be parsed; it is shown as text
    if "json" not in fetched.content_type and not fetched.text.lstrip().startswith(("{", "[")):
        return _NOT_JSON
    try:
        return pydantic_core.from_json(fetched.text)
    except ValueError as exc:
        return _TOO_DEEP if "recursion limit" in str(exc) else _NOT_JSON
    except MemoryError:  # past the worker's address space: shown as text
        return _NOT_JSON


def _body_text(fetched: Fetched) -> str:
    data = _json_body(fetched)
    if data is not _NOT_JSON and data is not _TOO_DEEP:
        return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))
    return fetched.text.strip() or fetched.reason


def _status_hint(status: int) -> str:
    return {
        400: "The request was rejected; check the arguments against the action's schema.",
        401: "Authentication failed; the connector's credentials are wrong or missing.",
        403: "Not permitted with these credentials; do not retry the same call.",
        404: "Not found; check the identifiers (discover the action or list first).",
        409: "Conflict with the current state; fetch the resource and retry if it makes sense.",
        422: "The service rejected the data; fix the fields named above.",
        429: "Rate limited; wait before calling again.",
    }.get(status, "The service failed; retrying later may help." if status >= 500 else "")
