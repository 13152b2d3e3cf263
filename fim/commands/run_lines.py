"""The lines `fim run` prints about a run besides its answer and its trace: `-v`'s summary
line (and `fim runs show`'s line per model call), and the warning printed even without
`-v` about a hook that broke (crashed, returned something that is not a `HookResult`,
printed JSON of the wrong shape, timed out). The hook chain turns each of those into a
block (hooks fail closed) and the model answers around it, so the run can end `ok` and the
bug would show only in `-v`'s trace. An ordinary decision (`allow`, a policy's `block`) is
not a failure and stays behind `-v`.
"""

from __future__ import annotations

from typing import Any

FAIL_CLOSED = "hooks fail closed"
"""The words every hook failure's reason carries (`fim.hooks.runner`, `fim.hooks.command`,
`fim.hooks.command_output`, `fim.hooks.command_pins`), and no decision a hook makes."""


def hook_failure(event: Any) -> str | None:
    """The warning line (without `warning:`) for a hook event that reports a failing hook,
    or None for a decision the hook made."""
    reason = event.reason or ""
    if FAIL_CLOSED not in reason or refuses_session(event):
        return None
    where = event.point + (f" on {event.tool_name}" if event.tool_name else "")
    if f"'{event.hook}'" in reason:  # the reason names the hook already
        return f"{where}: {reason}"
    return f"{where}: hook '{event.hook}' failed: {reason}"


def refuses_session(event: Any) -> bool:
    """Whether a hook event refused the session (a SessionStart block): the run ends with
    an `error:` line saying why, so no warning or `-v` line says it again."""
    return bool(event.point == "SessionStart" and event.decision == "block")


class HookWarnings:
    """One warning per failing hook per run: a hook that crashes on every call is said once."""

    def __init__(self) -> None:
        self._said: set[tuple[str, str]] = set()

    def line(self, event: Any) -> str | None:
        """The warning to print for `event` now, or None (not a failure, or said already)."""
        text = hook_failure(event)
        key = (event.run_id, event.hook)
        if text is None or key in self._said:
            return None
        self._said.add(key)
        return text


def plural(count: int, noun: str) -> str:
    """`1 model call`, `2 model calls`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def summary_line(event: Any, calls: int) -> str:
    """The last line of `fim run -v`: status, model calls made, tokens, cost when the
    price is known, duration."""
    usage = event.usage
    cost = "" if not usage.cost else f" · ${usage.cost:.4f}"  # none, or $0 (scripted)
    return (
        f"{event.status} · {plural(calls, 'model call')} · "
        f"{usage.prompt_tokens}+{usage.completion_tokens} tokens{cost} · "
        f"{event.duration_ms:.0f} ms"
    )


def model_call_line(event: Any, number: int) -> str:
    """A model call as `fim runs show` lists it: `· model call 1 · 164+6 tokens · 0.3 ms`
    (and the finish reason when it is not a plain stop)."""
    usage = event.usage
    ms = event.duration_ms
    took = f"{ms:.1f}" if ms < 10 else f"{ms:.0f}"
    finished = f" · {event.finish_reason}" if event.finish_reason not in (None, "", "stop") else ""
    return (
        f"· model call {number} · {usage.prompt_tokens}+{usage.completion_tokens} tokens · "
        f"{took} ms{finished}"
    )


def took(event: Any) -> str:
    """A tool result's time as `-v` shows it: `26 ms`, and apart the one-off start-up the
    call waited for (`3 ms + 1.9 s start-up`: the validator's load, the worker pool's start),
    which is not the tool's doing (newcomer-53 #13)."""
    own = f"{event.duration_ms:.0f} ms"
    startup = getattr(event, "startup_ms", 0.0) or 0.0
    if startup < 1:
        return own
    waited = f"{startup:.0f} ms" if startup < 1000 else f"{startup / 1000:.1f} s"
    return f"{own} + {waited} start-up"


def http_line(http: dict[str, Any]) -> str:
    """A connector call's request as `-v` shows it under the call:
    `GET http://127.0.0.1:8081/status/db → 503` (`→ no response`: unreachable, timed out)."""
    status = http.get("status")
    return f"{http.get('method')} {http.get('url')} → {status or 'no response'}"


def hook_block_reason(event: Any, warned: bool) -> str | None:
    """The reason `-v`'s hook line gives, or None: a hook that raised says so on every
    call, short, with where (`hook failed: KeyError: 'max_id' at hooks/guards.py:12`, also
    after its warning: newcomer-53 #16); another failure's warning said its reason once."""
    if refuses_session(event):
        return None
    if event.at and event.traceback:
        # deferred: only a hook that raised needs the traceback's reader
        from fim.project_frames import exception_attributes

        found = exception_attributes(event.traceback)
        line = f"{found['exception.type']}: {found['exception.message']}".splitlines()[0]
        return f"hook failed: {line} at {event.at.partition(' in ')[0]}"
    return None if warned else event.reason
