"""`GET /v1/runs/{id}` and `GET /v1/runs/{id}/events` from any replica (issue 24).

Both read the state store, so they answer for a run started on another replica or
running on a `fim worker`. The event stream replays the run's stored events and then
follows it live (`fim.store.live`: PostgreSQL LISTEN/NOTIFY) until its last event. Each
frame carries `id: <seq>`: a client that lost its replica reconnects to another one with
`Last-Event-ID` (or `?after=N`) and gets the rest, nothing twice. A key may have
`fim.server.limits.followers_cap` streams open at once (a 429 past that), each holding at
most `fim.store.event_batches.BATCH_BYTES` of stored events (attack-55 F1). A run's record
takes the same place while it is read and sent, and carries at most `RECORD_EVENT_BYTES`
of its events (attack-56 F2).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from fim.masking import StreamMasker, known
from fim.observe.trace_links import run_trace_link, trace_template
from fim.server.http import (
    MAX_INT64,
    JSONResponse,
    error,
    run_scope,
    session_owner,
    whole_number,
)
from fim.server.limits import Busy, Slot
from fim.server.queries import EventsQuery, read_query
from fim.server.streams import followed
from fim.store import get_store
from fim.store.live import read_batch, running_here, tail
from fim.store.owners import may_read
from fim.tasks import shielded

if TYPE_CHECKING:
    from fim.server.api import Api
    from fim.store import Store

RECORD_EVENT_BYTES = 1024 * 1024
"""How much event JSON (UTF-8, tokens left out) `GET /v1/runs/{id}` sends at most in
`data.events`; an event larger than that comes alone. Past it the answer's `events_cut`
points to `GET /v1/runs/{id}/events?after=<seq>` for the rest: one answer of a run with a
3.8 MB output was 11.7 MB, and 300 of them that were never read took a server to 3.5 GB
and another key's 6 ms run to 58 s (attack-56 F2)."""


def _after(request: Request) -> int | Response:
    """The last event id the client saw (`Last-Event-ID`, else `?after=`), or the 400
    naming it. Checked before the stream starts: a number past `MAX_INT64` would fail in
    the query, after the 200 was sent, and cut the stream."""
    query = read_query(request, EventsQuery)  # `?aftr=5` must not replay from the start
    if isinstance(query, Response):
        return query
    raw = request.headers.get("last-event-id")
    if not raw:
        return query.after
    after = whole_number(raw)
    if after is None:
        return error(
            400,
            f"after: the last event id seen, a whole number from 0 to {MAX_INT64}; "
            f"got {raw[:40]!r}",
            "send the id of the last event received (Last-Event-ID or ?after=)",
            param="after",
        )
    return after


def live_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `live` area (`fim.server.areas.live`)."""

    async def get_run(request: Request) -> Response | _Following:
        """The run record with its events (while it runs, those so far), at most
        `RECORD_EVENT_BYTES` of them (`events_cut` then says where the rest starts); a 429
        when the caller's key reads as many runs' events as it may (attack-56 F2)."""

        store = get_store(api.services)
        run_id = request.path_params["run_id"]
        try:  # counted first: a key past its cap costs no read of the store
            slot = api.limits.follow(session_owner(request))
        except Busy as exc:
            return exc.response()
        try:
            template = trace_template(api.holder.current.project)
            answer = await _record(store, run_id, run_scope(request), template)
        except BaseException:
            slot.release()
            raise
        return _Following(answer, slot)  # the body is held until sent: so is the slot

    async def run_events(request: Request) -> Response | _Following:
        """Server-sent events of one run: stored ones, then live ones, until it ends; a
        429 when the caller's key follows as many runs as it may."""

        store = get_store(api.services)
        run_id = request.path_params["run_id"]
        after = _after(request)
        if isinstance(after, Response):
            return after
        try:  # counted first: a key past its cap costs no read of the store
            slot = api.limits.follow(session_owner(request))
        except Busy as exc:
            return exc.response()
        try:
            found = await may_read(store, run_id, run_scope(request)) and (
                running_here(store, run_id) or await store.get_run(run_id) is not None
            )  # another key's run: not there
        except BaseException:
            slot.release()
            raise
        if not found:
            slot.release()
            return error(404, f"unknown run '{run_id}'")
        # ends at a stop's cut
        return _Following(followed(api, _frames(tail(store, run_id, after))), slot)

    async def cancel_run(request: Request) -> Response:
        """Stop a background run: 202 while it stops, 200 if it had not started, 409 when
        no background run of that id is going (finished, foreground, paused)."""
        # deferred: the queue (procrastinate) loads only for background runs
        from fim.server.background import cancel_run as cancel

        store = get_store(api.services)
        run_id = request.path_params["run_id"]
        if not await may_read(store, run_id, run_scope(request)):
            return error(404, f"unknown run '{run_id}'")  # another key's run: not there
        outcome = await cancel(api, run_id)
        if outcome is not None:
            body = {"run_id": run_id, "status": outcome}
            return JSONResponse(body, status_code=202 if outcome == "cancelling" else 200)
        record = await store.get_run(run_id)
        if record is None and not running_here(store, run_id):
            return error(404, f"unknown run '{run_id}'")
        status = record.status if record is not None else "running"
        return error(
            409,
            f"run '{run_id}' is {status}: only a background run still going can be cancelled",
            "a run in the foreground stops when its request is closed; a workflow paused at a "
            "human node stops when its approval is denied",
        )

    return {"get_run": get_run, "run_events": run_events, "cancel_run": cancel_run}


async def _record(
    store: Store, run_id: str, scope: str | None, template: str | None = None
) -> Response:
    """`GET /v1/runs/{id}`'s answer: the record, its events bounded (`_trace`), with the
    link to its trace when a `template` is set (`fim.observe.trace_links`)."""
    if not await may_read(store, run_id, scope):
        return error(404, f"unknown run '{run_id}'")  # another key's run: not there
    record = await store.get_run(run_id)
    if record is None and running_here(store, run_id):  # SQLite: in memory until the end
        events, cut = await _trace(store, run_id)
        first = events[0] if events else {}
        return JSONResponse(
            {
                "id": run_id, "kind": "agent", "name": first.get("agent", ""),
                "status": "running", "data": {"events": events} | _linked(template, events),
                "created_at": first.get("ts", 0.0), "updated_at": first.get("ts", 0.0),
            } | _cut(run_id, cut)
        )  # fmt: skip
    if record is None:
        return error(404, f"unknown run '{run_id}'")
    data = json.loads(json.dumps(asdict(record), default=str))
    if record.kind == "agent" and (
        record.status == "running" or data["data"].pop("events_in_log", False)
    ):  # a served run's events are stored once, in its event log
        events, cut = await _trace(store, run_id)
        data["data"] = {**data["data"], "events": events}
        data |= _cut(run_id, cut)
    if isinstance(data.get("data"), dict):
        data["data"] |= _linked(template, data["data"].get("events") or [])
    return JSONResponse(data)


def _linked(template: str | None, events: list[dict[str, Any]]) -> dict[str, Any]:
    """`trace_url` when the run's trace has a link (`FIM_TRACE_URL`, newcomer-53 #9)."""
    link = run_trace_link(template, events)
    return {"trace_url": link} if link else {}


async def _trace(store: Store, run_id: str) -> tuple[list[dict[str, Any]], int | None]:
    """Run `run_id`'s stored events but tokens, oldest first, read a bounded batch at a
    time and kept up to `RECORD_EVENT_BYTES` of JSON; and, when they stop there, the
    sequence number of the last one kept (None: every event is there)."""
    kept: list[dict[str, Any]] = []
    total = after = last = 0
    while True:
        batch, more = await read_batch(store, run_id, after)
        for seq, event in batch:
            after = seq
            if event.get("type") == "token":
                continue
            size = len(json.dumps(event, ensure_ascii=False, default=str).encode())
            if kept and total + size > RECORD_EVENT_BYTES:
                return kept, last
            kept.append(event)
            total, last = total + size, seq
        if not more or not batch:
            return kept, None


def _cut(run_id: str, last: int | None) -> dict[str, Any]:
    """`events_cut` (`fim.server.responses.EventsCut`) when the trace stops early."""
    if last is None:
        return {}
    rest = f"/v1/runs/{run_id}/events?after={last}"
    return {
        "events_cut": {
            "after": last, "max_bytes": RECORD_EVENT_BYTES, "rest": rest,
            "message": f"data.events stops after event {last}, at {RECORD_EVENT_BYTES} "
            f"bytes of events: GET {rest} sends the rest",
        }
    }  # fmt: skip


class _Following:
    """A run's event stream (or its record), sent with its key's follower slot held:
    released once it has been sent or its client has gone, and a stream closed then
    (Starlette never closes a streaming body: the tail's batch and its subscription stayed
    until collected)."""

    def __init__(self, response: Response, slot: Slot) -> None:
        self.response = response
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.response(scope, receive, send)
        finally:
            self.slot.release()
            body = getattr(self.response, "body_iterator", None)
            if body is not None and hasattr(body, "aclose"):
                await shielded(body.aclose())


async def _frames(events: AsyncIterator[tuple[int, dict[str, Any]]]) -> AsyncIterator[bytes]:
    """`id`, `event` and `data` per stored event, masked again on the way out (tokens as a
    stream, so a secret split over two tokens is caught)."""

    mask = known()
    tokens = StreamMasker(mask)
    async for seq, event in events:
        kind = str(event.get("type", "message"))
        if kind == "token":
            event = {**event, "text": tokens.feed(str(event.get("text", "")))}
        else:
            held = tokens.flush()
            if held:
                yield _frame(
                    seq, "token", {"type": "token", "run_id": event.get("run_id"), "text": held}
                )
            event = mask.value(event)
        yield _frame(seq, kind, event)


def _frame(seq: int, kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, ensure_ascii=False)
    return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n".encode()
