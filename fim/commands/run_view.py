"""What `fim run` shows and asks at the terminal: the events as they come (the answer on
stdout, the trace and failures on stderr) and a `confirm` hook's question. Its own module
because it decides what reaches a human's terminal (model-written text through
`printable`) and how a human's answer is recorded. `fim runs show` renders a stored run
with the same printer (`fim.commands.run_timeline`); the run's record is kept by
`fim.commands.run_record`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import time
from typing import TYPE_CHECKING, Any

from fim.commands import err
from fim.commands.run_lines import (
    HookWarnings,
    hook_block_reason,
    http_line,
    model_call_line,
    summary_line,
    took,
)
from fim.stdout_guard import answer_stdout
from fim.terminal import clipped, markup, printable, rich_console

if TYPE_CHECKING:
    from fim.events import Event, MessageEvent, Token


class ApprovalLogFilter(logging.Filter):
    """Drops the hooks' log lines `fim run` says itself: a new approval request (a notice)
    and a hook that failed to run (its warning line, said once per hook)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "hook_failure", False):
            return False
        return not (isinstance(record.msg, str) and record.msg.startswith("approval "))


def interactive() -> bool:
    """Someone at a terminal can answer a question: stdin and stderr are both a TTY."""
    return sys.stdin.isatty() and sys.stderr.isatty()


EXPIRED = "expired"
"""What `read_answer` returns when its time ran out before a line came (a typed line ends
with a newline, or is empty at the end of input: it is never this)."""


def read_answer(prompt: str, timeout: float | None = None) -> str:
    """One line typed at the terminal, or `EXPIRED` once `timeout` seconds pass without one
    (a test replaces it). Runs in a worker thread: it may block that long.

    Keys typed before the question are dropped first: an answer half-typed to a question
    that expired must not answer the next one. The wait is a `select()` on stdin (POSIX);
    where that is not possible it reads without a deadline, and the caller finds out
    afterwards that the approval had expired."""
    if _drop_typed_ahead():
        sys.stderr.write(
            "\ntoo late: what you typed after an earlier question had expired was ignored"
        )
    sys.stderr.write(prompt)
    sys.stderr.flush()
    if timeout is not None and _line_ready(timeout) is False:
        _drop_typed_ahead()  # a half-typed line must not answer the next question
        return EXPIRED
    return sys.stdin.readline()


def _line_ready(timeout: float) -> bool | None:
    """Whether a line can be read from stdin within `timeout` seconds; None where stdin
    cannot be waited on (no file descriptor, Windows): the read then has no deadline."""
    # deferred: only a terminal's question waits with a deadline
    import select

    try:
        ready, _, _ = select.select([sys.stdin], [], [], max(0.0, timeout))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return bool(ready)


def _drop_typed_ahead() -> bool:
    """Discard what was typed at the terminal and not read yet (POSIX; nothing elsewhere);
    True when a whole line had been typed (a late answer to an earlier question)."""
    if not sys.stdin.isatty():
        return False  # a pipe or a test's stream: nothing was typed ahead
    try:
        # deferred: termios exists on POSIX only
        import termios
    except ImportError:
        return False
    late = _line_ready(0.0) is True
    try:
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    except (termios.error, OSError, ValueError):
        return False
    return late


def expires_in(seconds: float) -> str:
    """A deadline as a human reads it in a question: `5m`, `4m 30s`, `45s`. Whole seconds,
    rounded up: a question asked at once about a 300 s approval says `5m`, not `4m 59s`."""
    whole = max(0, math.ceil(seconds - 1e-6))
    minutes, rest = divmod(whole, 60)
    if not minutes:
        return f"{rest}s"
    return f"{minutes}m" + (f" {rest}s" if rest else "")


NO_TERMINAL = "fim run (no terminal)"
"""Who denied a call that nobody could be asked about, as the approval records it."""


class Approvals:
    """How `fim run` answers a `confirm` hook's request (a pending approval in the state
    store, announced by a notice while the hook waits on it).

    - At a terminal (`ask`): `Allow <tool> <args>? [y/N/a] (expires in 5m; ...)`, typed
      right here; `a` allows this call and every later call of the same agent to the same
      tool in this `fim run` (Claude Code's "don't ask again"), each still recorded as its
      own approval. A hook's `permissionDecisionReason` follows the arguments, `(<reason>)`.
      The question stops waiting when the approval expires and says the call
      was not run; an answer that comes too late is told so, never silently dropped.
    - Without one and without `--wait-approvals`: denied at once (fail closed, as MCP
      elicitation is declined): nobody would see the request before it expires, and the run
      would hang for the hook's whole timeout.
    - With `--wait-approvals`: the request is printed once and the hook waits for
      `fim approvals approve|deny ID` from another shell.

    A decision is recorded the way `fim approvals approve|deny` records it
    (`Store.resolve_approval`, by `cli:<user>`), so the hook that waits, the audit trail and
    `fim approvals list --all` see the same thing whichever way it was decided."""

    def __init__(self, *, ask: bool = False, wait: bool = False) -> None:
        self.ask = ask
        self.wait = wait
        self.always: set[tuple[str, str]] = set()
        """(agent, tool) the human answered `a` for: allowed without asking again."""

    async def answer(self, notice: Any, services: Any) -> bool:
        """Decide (or announce) the tool approval `notice` names; False for any other
        notice, which the printer shows as before."""
        approval_id = notice.data.get("approval_id")
        if not approval_id or "elicitation" in notice.data or "tool_name" not in notice.data:
            return False
        # deferred: loading the state store costs tens of ms
        from fim.commands.approvals import cli_user
        from fim.hooks.approval import NOBODY_ASKED, preview
        from fim.store import get_store

        store = get_store(services)
        pending = await store.get_approval(approval_id)
        if pending is None or pending.kind != "tool" or pending.status != "pending":
            return False
        if self.wait:
            err(notice.message)
            return True
        if self.ask:
            tool = printable(pending.tool_name)
            if (pending.agent, pending.tool_name) in self.always:
                await store.resolve_approval(
                    approval_id, True, by=cli_user(), data={"note": "always, at the terminal"}
                )
                err(f"allowed {tool} (approval {approval_id}): you answered `a` for it")
                return True
            args = preview(json.dumps(pending.args, ensure_ascii=False, default=str), 300)
            left = None if pending.expires_at is None else pending.expires_at - time.time()
            if left is not None and left <= 0:
                err(f"approval {approval_id} expired; the call to {tool} was not run")
                return True
            deadline = "" if left is None else f"expires in {expires_in(left)}; "
            # a hook's `permissionDecisionReason` is its question (as in Claude Code)
            why = f" ({printable(pending.reason)})" if _by_hook(pending) and pending.reason else ""
            # on a line of its own, after whatever the answer so far left on the last one;
            # the model's words cannot be escape sequences any more (`printable`)
            question = (
                f"\nAllow {tool} {printable(args)}{why}? [y/N/a] ({deadline}a: every call to "
                f"{tool} in this run) "
            )
            typed = await asyncio.to_thread(read_answer, question, left)
            if typed == EXPIRED:  # the hook blocks the call on its own once it expires
                err(f"\napproval {approval_id} expired; the call to {tool} was not run")
                return True
            reply = typed.strip().lower()
            approved = reply in ("y", "yes", "a", "always")
            always = reply in ("a", "always")
            note = "always, at the terminal" if always else None
            if not approved:
                note = "denied at the terminal"
            resolution = await store.decide_approval(
                approval_id, approved, by=cli_user(), data={"note": note} if note else None
            )
            decided = resolution.approval
            if resolution.changed and always:
                self.always.add((pending.agent, pending.tool_name))
            if decided is not None and decided.status == "expired":
                err(
                    f"too late: approval {approval_id} had expired before your answer; the "
                    f"call to {tool} was not run"
                )
            elif decided is not None and not resolution.changed:
                err(
                    f"too late: approval {approval_id} was already {decided.status} by "
                    f"{printable(str(decided.resolved_by))}; your answer was not recorded"
                )
            return True
        note = (
            "nobody could be asked: fim run had no terminal (`fim run --wait-approvals` waits "
            "for `fim approvals approve ID`)"
        )
        await store.resolve_approval(
            approval_id, False, by=NO_TERMINAL, data={"note": note, NOBODY_ASKED: True}
        )
        who = "a hook" if _by_hook(pending) else "a `confirm` hook"
        err(
            f"denied {pending.tool_name} (approval {approval_id}): {who} asks a "
            "human and this run has no terminal (rerun with --wait-approvals to wait for "
            f"`fim approvals approve ID`)"
        )
        return True


def _by_hook(approval: Any) -> bool:
    """Whether a hook's `permissionDecision: "ask"` made the approval (not `confirm`)."""
    return bool(approval.data.get("asker") == "hook")


class EventPrinter:
    """Renders events for a terminal: the answer on stdout (fim's own: `answer_stdout`,
    where no print of the project's goes), the trace on stderr."""

    def __init__(
        self, *, verbose: bool = False, as_json: bool = False, model_calls: bool = False
    ) -> None:
        self.verbose = verbose
        self.as_json = as_json
        self.model_calls = model_calls
        """Print a line per model call too (`fim runs show`), not only count them."""
        self._run_id = ""
        """The run this command started (its first event's): the one `fim runs show` finds,
        named on `-v`'s last line; a delegated agent's run is recorded inside it."""
        self.approvals = Approvals()
        """What answers a `confirm` hook's request (`fim run` sets it from the terminal)."""
        self._streamed = False

        # deferred: loading fim.masking costs a few ms
        from fim.masking import StreamMasker, known

        self.err = rich_console(stderr=True, highlight=False, soft_wrap=True)
        self._tokens = StreamMasker(known())
        self._last_token: Token | None = None
        """Tokens are masked as a stream: a secret split over two tokens is still caught."""
        self._calls: dict[str, int] = {}
        """Model calls made per run id (`llm_call` events): a call a budget refused before
        sending it is none, though the run's `iterations` counts its turn."""
        self._traces: dict[str, str] = {}
        """Trace ids per run id (`run_started`), shown on `-v`'s last line."""
        self._hooks = HookWarnings()
        self._held: MessageEvent | None = None
        """A whole message, printed with the next event: as `error:` on stderr when that
        event ends the run at max_iterations (the message says why), else on stdout."""

    def show(self, event: Event) -> None:
        # deferred: loading fim.masking costs a few ms (fim.events is loaded by now)
        from fim.events import (
            ErrorEvent,
            HookEvent,
            LLMCall,
            MessageEvent,
            Notice,
            RunFinished,
            RunStarted,
            Token,
            ToolCallEvent,
            ToolProgress,
            ToolResultEvent,
        )
        from fim.masking import mask_model

        event = mask_model(event)
        self._run_id = self._run_id or event.run_id
        broke = self._hooks.line(event) if isinstance(event, HookEvent) else None
        if broke:
            self.err.print(f"[yellow]warning:[/yellow] {markup(broke)}")
            if at := getattr(event, "at", None):  # a hook that raised: where
                self.err.print(f"  at {markup(at)}")
        if self._held is not None:
            self._release(self._held, event)
        if self.as_json:
            if isinstance(event, Token):
                event = event.model_copy(update={"text": self._tokens.feed(event.text)})
                self._last_token = event
                if not event.text:
                    return
            elif (held := self._tokens.flush()) and self._last_token is not None:
                held_token = self._last_token.model_copy(update={"text": held})
                answer_stdout().write(held_token.model_dump_json() + "\n")
            answer_stdout().write(event.model_dump_json() + "\n")
            answer_stdout().flush()
            return
        match event:
            case LLMCall():
                self._calls[event.run_id] = calls = self._calls.get(event.run_id, 0) + 1
                if self.model_calls:
                    self.err.print(f"[dim]{model_call_line(event, calls)}[/dim]")
            case Token():
                answer_stdout().write(printable(self._tokens.feed(event.text)))
                answer_stdout().flush()
                self._streamed = True
            case MessageEvent() if self._streamed:
                answer_stdout().write(printable(self._tokens.flush()) + "\n")
                answer_stdout().flush()
                self._streamed = False
            case MessageEvent():
                self._held = event
            case ErrorEvent():
                self.err.print(f"[red]error:[/red] {markup(event.message)}")
            case ToolCallEvent() if self.verbose:
                self._end_stream()
                args = json.dumps(event.arguments, ensure_ascii=False)
                self.err.print(f"[cyan]→ {event.name}[/cyan] {markup(clipped(args, 300))}")
            case ToolResultEvent() if self.verbose:
                style = "red" if event.is_error else "green"
                self.err.print(
                    f"[{style}]← {event.name}[/{style}] [dim]({took(event)})[/dim] "
                    f"{markup(clipped(event.content, 500, middle=event.is_error))}"
                )
                if event.at:  # a project's tool raised: where (newcomer-53 #1)
                    self.err.print(f"  at {markup(event.at)}")
                if event.http:  # a connector's request: where it went (newcomer-53 #10)
                    self.err.print(f"  [dim]{markup(http_line(event.http))}[/dim]")
            case HookEvent() if self.verbose:
                # a failure's reason once: not again after its warning, nor before the
                # `error:` line that a refused session ends with (newcomer-50 #9); a hook
                # that raised, short and with where, every time (newcomer-53 #16)
                said = hook_block_reason(event, bool(broke))
                reason = f": {markup(said)}" if said else ""
                self.err.print(
                    f"[magenta]⚑ {event.point} {event.hook} {event.decision}[/magenta]{reason}"
                )
            case ToolProgress():
                total = f"/{event.total:g}" if event.total is not None else ""
                text = f" {markup(clipped(event.message, 200))}" if event.message else ""
                self.err.print(f"[dim]… {event.name} {event.progress:g}{total}{text}[/dim]")
            case Notice() if self.verbose or "elicitation" in event.data:
                self.err.print(f"[yellow]• {markup(event.message)}[/yellow]")
            case RunStarted() if event.trace_id:
                self._traces[event.run_id] = event.trace_id
            case RunFinished() if self.verbose:
                calls = self._calls.get(event.run_id, 0)
                trace = self._traces.get(event.run_id)
                traced = f" · trace {trace}" if trace else ""  # what a trace backend finds
                ran = f" · run {event.run_id}" if event.run_id == self._run_id else ""
                self.err.print(f"[dim]{summary_line(event, calls)}{ran}{traced}[/dim]")
        if isinstance(event, RunFinished) and event.run_id == self._run_id:
            self._run_id = ""  # a chat's next turn is a run of its own

    def close(self) -> None:
        """The end of the events: a message held for the next event, or an answer being
        streamed, is printed now (a stored run that ended without `run_finished`)."""
        if self._held is not None:
            held, self._held = self._held, None
            answer_stdout().write(printable(held.content) + "\n")
            answer_stdout().flush()
        self._end_stream()

    def _release(self, held: MessageEvent, after: Event) -> None:
        self._held = None
        if getattr(after, "status", None) == "max_iterations" and after.run_id == held.run_id:
            self.err.print(f"[red]error:[/red] {markup(held.content)}")
            return
        answer_stdout().write(printable(held.content) + "\n")
        answer_stdout().flush()

    def _end_stream(self) -> None:
        if self._streamed:
            answer_stdout().write(printable(self._tokens.flush()) + "\n")
            self._streamed = False
