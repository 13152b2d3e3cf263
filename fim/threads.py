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


async def own_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a new daemon thread, awaited through a future: cancelling the wait
    (a timeout) abandons the thread without it holding an executor's thread or the exit.
    Run in a copy of the caller's context, as `asyncio.to_thread` runs it; a `SystemExit`
    or the like it raises comes back as a RuntimeError (the code's failure, not fim's
    exit)."""
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
        with contextlib.suppress(RuntimeError):  # the loop closed while it ran: no one waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="fim-project-code", daemon=True).start()
    return await done
