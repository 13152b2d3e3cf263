"""Running the project's own synchronous code (a Python tool, a `python:` eval assertion)
off the event loop, in a thread of its own.

Not `asyncio.to_thread`: a thread cannot be killed, so a function past its deadline keeps
running, and on the loop's default executor (six threads on two cores) six such calls
starved every later `to_thread` -- fim's own off-loop work included -- and `asyncio.run`
waited for them at its end. A daemon thread of its own holds neither: the caller's wait
ends at its deadline, and the process exits without joining it. A function that spins
keeps some CPU until then; the sandboxed tools (`python_exec`, `shell`) run in killable
processes instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

from fim.locks import current_owner

MAX_LIVE = 16
"""Threads of the project's code alive at once in the process, abandoned ones included (a
thread ends only when its function returns); an API key's calls hold at most half, and a
key holding none may start one past it (up to twice as many in all), so other keys' stuck
calls never shut it out. A call past these waits for a place, within its caller's timeout.
Without it, each timed-out call of a function that sleeps or spins left a thread behind:
40 calls, 40 threads; six spinning ones held the CPU for minutes (attack-40 #3, -41 #1)."""

_live: dict[str, int] = {}
_counting = threading.Lock()


def _claim(owner: str) -> bool:
    """Take a place for `owner` (a key hash, "" for none), or say there is none now."""
    with _counting:
        total = sum(_live.values())
        mine = _live.get(owner, 0)
        first = mine == 0 and total < 2 * MAX_LIVE  # whatever the other keys left running
        full = total >= MAX_LIVE or bool(owner and mine >= MAX_LIVE // 2)
        if full and not first:
            return False
        _live[owner] = mine + 1
        return True


def _release(owner: str) -> None:
    with _counting:
        _live[owner] -= 1
        if not _live[owner]:
            del _live[owner]


async def own_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a new daemon thread, awaited through a future: cancelling the wait
    (a timeout) abandons the thread without it holding an executor's thread or the exit.
    Run in a copy of the caller's context, as `asyncio.to_thread` runs it; a `SystemExit`
    or the like it raises comes back as a RuntimeError (the code's failure, not fim's
    exit). Waits while `MAX_LIVE` such threads live, or half of them are the current key's
    (`fim.locks.current_owner`): the threads end on their own, in any loop, so the wait
    polls (a few ms at first, at most a tenth of a second)."""
    owner = current_owner.get()
    pause = 0.005
    while not _claim(owner):
        await asyncio.sleep(pause)
        pause = min(0.1, pause * 2)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the wait timed out (cancelled) before the function returned
            return
        if error is None:
            done.set_result(result)
        else:
            done.set_exception(error)

    def work() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = context.run(fn, *args)
        except Exception as exc:  # the project's code: handed to the caller
            error = exc
        except BaseException as exc:  # SystemExit and the like: its failure, not fim's exit
            error = RuntimeError(f"{type(exc).__name__}: {exc}")
        finally:
            _release(owner)
        with contextlib.suppress(RuntimeError):  # the loop closed while it ran: no one waits
            loop.call_soon_threadsafe(settle, result, error)

    try:
        threading.Thread(target=work, name="fim-project-code", daemon=True).start()
    except BaseException:
        _release(owner)
        raise
    return await done
