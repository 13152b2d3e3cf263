"""A stopping `fim serve` (SIGTERM from an orchestrator, Ctrl+C): one line saying how many
runs it waits for and how long (`server.shutdown_timeout`), and the answer a run cut by the
stop gets.

A run still going when the bound is reached is cut by uvicorn, which cancels its request.
That used to read as the client's doing (499 `client_closed_request`, which the OpenAI SDKs
do not retry), so every run longer than the bound failed during a rolling upgrade with an
error pointing at the caller. It is now a 503 `server_shutting_down`, and its run record says
the server stopped before it ended. A run that had called no tool yet gets `Retry-After: 1`,
which the SDKs retry (on another replica, or this one restarted): nothing it did is done
twice. A run that had called one gets `x-should-retry: false` instead: a retry runs the
request from the start and would call its tools again (a second email, ticket or payment,
attack-44), so whether to send it again is the caller's decision, not the SDK's.

A streamed run has sent its 200 long before: uvicorn's cut ended its stream with no last
event, the client reading a broken connection, and logged the cancellation's traceback. So
fim cuts its streamed runs itself, `CUT_AHEAD` before uvicorn's bound (`cut_streams`): each
stream (`until_stop`) ends its run, which records itself cancelled as the server's doing,
and sends a last error event `server_shutting_down` in its endpoint's own error format, then
ends as a response should, one log line per run. A stream whose client stopped reading (a
stalled proxy: the socket is full) sits in `send`, not between events; if its consumer lets
its send be abandoned (`Sending`: fim's SSE, A2A), the cut cancels that send shortly after,
and the stream closes its run and ends without its last event (nobody reads it). uvicorn
still holds that connection open until its bound, then the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncGenerator, AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from fim.events import ErrorEvent
from fim.server.replies import JSONResponse, error
from fim.tasks import RUNNING

T = TypeVar("T")

log = logging.getLogger("fim.server")

SERVER_STOPPED = "the server stopped before it ended"
"""The error of a run record cut by the server's stop (as `fim.server.background`'s)."""


INCOMPLETE = "ASGI callable returned without completing response."


class _StopLines(logging.Filter):
    """Drop uvicorn's lines that mislead during fim's stop: "Waiting for ... (CTRL+C to
    force quit)" (no Ctrl+C under an orchestrator; `begin` says what it waits for and how
    long), and, for a stream fim dropped because its client stopped reading (`_abandon`,
    which logs its own line), its "returned without completing response" and the "Cancel
    0 running task(s)" of a bound reached only because that client's connection stayed."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0
        self.any_dropped = False

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "CTRL+C to force quit" in message:
            return False
        if message == INCOMPLETE and self.dropped:
            self.dropped -= 1
            return False
        return not (self.any_dropped and message.startswith("Cancel 0 running task(s)"))


_QUIET = _StopLines()


def runs_in_flight(api: Any) -> int:
    """The runs this process is driving: requests' runs and its own background runs."""
    going = api.services.cache.get("fim.background")  # fim.server.background.Going
    return int(api.active_runs) + len(getattr(going, "tasks", ()))


def begin(api: Any, bound: float) -> None:
    """The server stops: mark `api` stopping (a run cut from now on is the server's doing,
    `shutting_down`) and log the line an operator reads during a rollout. Once only (a
    second signal repeats nothing)."""
    if api.stopping:
        return
    api.stopping = True
    logging.getLogger("uvicorn.error").addFilter(_QUIET)
    loop = asyncio.get_running_loop()
    ahead = min(CUT_AHEAD, bound / 2)
    loop.call_later(max(bound - ahead, 0.0), cut_streams, api, ahead / 2)
    count = runs_in_flight(api)
    log.info(
        "stopping: waiting up to %s s for %d run%s in flight (server.shutdown_timeout, "
        "--shutdown-timeout)",
        f"{bound:g}",
        count,
        "" if count == 1 else "s",
    )


CUT = "server_shutting_down"
"""The code of a run cut by the server's stop: the 503's, and the last event's of a stream."""

CUT_AHEAD = 1.0
"""How long before uvicorn's bound fim cuts its streamed runs (at most half the bound): the
time to end each run and send its last event."""

STREAMS = "fim.streams"
"""The key of a server's streamed runs (`_Streams`) in its services' cache."""


class StreamCut(Exception):
    """A streamed run cut by the stopping server (`until_stop`): its stream sends a last
    error event (`event()`, or `message` in the endpoint's own format) and ends."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        # the OpenAI SDKs show a streamed error's `message` only: what to do is in it
        self.message = (
            f"the server is stopping and cut run {run_id} before it ended (GET /v1/runs/"
            f"{run_id} shows what it did before the request is sent again; "
            "server.shutdown_timeout bounds how long a stopping server waits)"
        )
        super().__init__(self.message)

    def event(self) -> dict[str, Any]:
        """fim's own `error` event of the run."""
        return ErrorEvent(run_id=self.run_id, kind=CUT, message=self.message).model_dump(
            mode="json"
        )


FINAL = frozenset({"run_finished", "workflow_finished"})
"""The last event of a run: a stream past its own is ending, and no cut touches it."""


class Sending:
    """A stream consumer's word that the stop may abandon its send (`SENDING`): it takes
    a `CancelledError` there while `abandoned` is set, closes what it iterates (so the
    stream's run ends, in the stream's own task), and ends without raising."""

    def __init__(self) -> None:
        self.abandoned = False
        self.over = False  # its response has ended: nothing of it is cancelled any more


SENDING: ContextVar[Sending | None] = ContextVar("fim_stream_sending", default=None)
"""Set by a consumer of `until_stop` that takes an abandoned send (`fim.server.streams`'
SSE, the A2A executor), for the task that iterates it."""


@dataclass(eq=False)
class _Stream:
    task: asyncio.Task[Any]
    run_id: str
    cut: bool = False
    waiting: bool = False  # on the run's next event: a cut cancels the wait
    cancelled: bool = False
    finished: bool = False  # its run's last event has passed: only its record is left
    sending: Sending | None = None
    closing: bool = False  # ending its run after the cut: not abandoned meanwhile


class _Streams:
    """A server's streamed runs in flight, and whether the stop has cut them."""

    def __init__(self) -> None:
        self.going: set[_Stream] = set()
        self.cut = False


def _streams(api: Any) -> _Streams:
    streams: _Streams = api.services.get(STREAMS, _Streams)
    return streams


def cut_streams(api: Any, grace: float = 0.0) -> None:
    """Cut every streamed run in flight (and any started from now on): one waiting for
    its next event is cancelled there, one sending an event stops before the next. One
    still in that send `grace` seconds later (its client is not reading) has the send
    abandoned if its consumer takes it (`Sending`): uvicorn's bound cut it, with a
    traceback, and the server exited seconds past its bound (attack-47 F4)."""
    streams = _streams(api)
    streams.cut = True
    loop = asyncio.get_running_loop()
    for stream in list(streams.going):
        if stream.finished:
            continue
        stream.cut = True
        if stream.waiting and not stream.cancelled:
            stream.cancelled = True
            stream.task.cancel(CUT)
        elif stream.sending is not None:
            loop.call_later(grace, _abandon, stream)


def _abandon(stream: _Stream) -> None:
    """Cancel the send `stream` is still in, unless it got past it since the cut."""
    sending = stream.sending
    if sending is None or sending.over or stream.waiting or stream.closing:
        return
    if stream.task.done() or sending.abandoned:
        return
    sending.abandoned = True
    _QUIET.dropped += 1
    _QUIET.any_dropped = True
    stream.task.cancel(CUT)


async def until_stop(api: Any, run_id: str, events: AsyncIterator[T]) -> AsyncGenerator[T, None]:
    """`events` (a streamed run's), until the stopping server cuts it (`cut_streams`):
    the run is then ended (it records itself cancelled by the server's stop) and
    `StreamCut` raised, for the stream to send its last event. `run_id` "": a stream
    that follows a run it does not drive (`fim.server.streams.followed`)."""
    streams = _streams(api)
    task = asyncio.current_task()
    assert task is not None
    stream = _Stream(task, run_id, cut=streams.cut, sending=SENDING.get())
    streams.going.add(stream)
    ended = False
    close = getattr(events, "aclose", None)
    try:
        while not stream.cut:
            stream.waiting = True
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if not stream.cancelled:
                    raise
                task.uncancel()  # fim's own cancellation, taken: the stream goes on
                ended = True  # the run has ended with the cancellation
                break
            finally:
                stream.waiting = False
            if getattr(event, "type", "") in FINAL and getattr(event, "run_id", "") == run_id:
                stream.finished = True  # not a nested run's
            yield event
        stream.closing = True
        if not ended and close is not None:
            await close()
        stream.closing = False
        if run_id:  # a follower's stream (no run of its own) just ends
            log.warning("stopping: cut streamed run %s at the shutdown bound", run_id)
        raise StreamCut(run_id)
    except GeneratorExit:  # closed at `yield`: its consumer's send was abandoned
        if stream.sending is not None and stream.sending.abandoned and close is not None:
            await close()
        if stream.sending is not None and stream.sending.abandoned and run_id:
            log.warning(
                "stopping: cut streamed run %s at the shutdown bound; its client was not "
                "reading, so the stream ends without its last event",
                run_id,
            )
        raise
    finally:
        streams.going.discard(stream)


def on_signals(api: Any, bound: float) -> None:
    """In a `--workers` child, whose uvicorn server fim does not make: call `begin` when
    the SIGTERM/SIGINT that stops the server arrives, then uvicorn's own handler (which
    must already be installed: call this from the app's lifespan start)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if not callable(previous):
            continue

        def handler(signum: int, frame: Any, previous: Any = previous) -> None:
            loop.call_soon_threadsafe(begin, api, bound)
            previous(signum, frame)

        signal.signal(sig, handler)


def called_tools(trace: list[dict[str, Any]]) -> bool:
    """Whether a run's events (`Api.run_to_end`'s trace) show it may have called a tool:
    what a retry of its request would do again. A `dag` run's steps start their tools in
    the loop pass that queues their events, so its trace may not show a call yet (attack-45
    F2): once its planner answered, it counts as having called one."""
    dag = False
    for event in trace:
        kind = event.get("type")
        if kind in ("tool_call", "step_started", "node_started"):
            return True
        if kind == "run_started":
            dag = event.get("engine") == "dag"
        elif kind == "llm_call" and dag:
            return True
    return False


def shutting_down(run_id: str, did_work: bool = False) -> JSONResponse:
    """The answer to a request whose run the stopping server cut: a 503 the OpenAI SDKs
    retry after `Retry-After` seconds when the run had called no tool (`did_work`), else
    one they do not retry (`x-should-retry: false`), saying the run did work before it was
    cut."""
    if not did_work:
        answer = error(
            503,
            f"the server is stopping and cut run {run_id} before it ended",
            "retry the request: another replica, or this server once restarted, runs it "
            "(server.shutdown_timeout bounds how long a stopping server waits)",
            code="server_shutting_down",
        )
        answer.headers["Retry-After"] = "1"
        return answer
    answer = error(
        503,
        f"the server is stopping and cut run {run_id} before it ended, after the run had "
        "called tools: sending the request again runs it from the start and calls them again",
        f"see what it did (GET /v1/runs/{run_id}) before sending the request again "
        "(server.shutdown_timeout bounds how long a stopping server waits)",
        code="server_shutting_down",
    )
    answer.headers["x-should-retry"] = "false"
    return answer


SETTLE_SECONDS = 5.0
"""How long a stopped server waits for the work its runs left behind (`settle`)."""


async def settle(api: Any, timeout: float = SETTLE_SECONDS) -> None:
    """Before a stopped server closes its store: let the runs the stop cut finish ending,
    and the work they started without waiting for it (`fim.tasks.spawn`). The record of a
    run cut by the stop is written by such a task (`shielded`), which the closing loop
    would otherwise cancel, leaving the run without its record. Bounded: what does not end
    by then is left to the loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    current = asyncio.current_task()
    while loop.time() < deadline:
        pending = [task for task in RUNNING if task is not current and not task.done()]
        if not pending and not api.active_runs:
            return
        if pending:
            await asyncio.wait(pending, timeout=max(deadline - loop.time(), 0))
        else:  # a cut run still unwinding: its record's task starts as it ends
            await asyncio.sleep(0.01)
