"""Keeping what the project's own Python prints off fim's stdout (newcomer-50 #1).

fim's stdout is what a command answers: `fim mcp serve`'s JSON-RPC stream, `fim run
--json`'s events, `fim eval --json -`'s report, a plain `fim run`'s answer sent to a file.
The project's Python (a `module:function` tool, a `python:` hook, a `python:` eval
assertion, a hooks module as it is imported) prints as it would anywhere: every ADK and
openai-agents tutorial tool does. None of that may reach fim's stdout, where one stray
line breaks the client parsing it. `guarded`, entered once by the command line's entry
point (`fim.cli.main`), puts two layers in place:

- `sys.stdout` becomes a `_Guard` over what it was. A write made by the project's code
  goes where a hook's stderr goes (`fim.hooks.command`): one line at INFO on the
  `fim.hooks.output` logger per line printed, masked, cut to `MAX_LINE` characters (`fim
  run -v` shows it, `fim serve --log-level info` logs it; never an event, never the
  model's or an API caller's to read), as `adk web` shows a tool's prints in its log.
  What is the project's code: a call of a Python tool (`calling`, a contextvar, so the
  worker thread of a sync tool and the tasks an async tool starts carry it), or any write
  with a frame of a hooks-folder module on the stack (their package names start with
  `fim.hooks.python_hooks.PACKAGE_PREFIX`): a hook, an eval assertion, a module's
  top-level code, a thread the project started. Attribution fails closed (attack-56 F1):
  a write from a thread other than the command's (a tool's thread pool, `run_in_executor`,
  a thread a helper outside hooks/ started) is the project's too, under the thread's name
  (except in the servers, whose log fim writes from any thread); and once a command has
  taken its answer stream (`claim_stdout`: `fim run`, `fim eval --json -`, `fim mcp
  serve`, whose writers write there and nowhere else), every write to `sys.stdout` is.
  `sys.stdout.buffer`, its `raw` and both `fileno()`s never lead to the private stream.
  A line the log shows while fim logs a diverted one (a handler the project put on
  `sys.stdout`) goes to stderr, never to the answer (F3). A line longer than
  `MAX_PENDING` is logged once, masked then cut, and the rest of it up to its newline is
  dropped: a piece logged alone could show the tail of a secret (F5).
- When fd 1 is not a terminal (a pipe or a file: something parses it), and the command
  answers on stdout (any but the servers, `fim serve` and `fim worker`, whose stdout is a
  log), fim writes to a private duplicate of fd 1, and fd 1 itself points at stderr for
  the rest of the process: `os.write(1, ...)`, `sys.__stdout__`, a C library's output and
  a child process that inherits fd 1 all land on stderr. A project asking `sys.stdout` for
  its descriptor (`subprocess.run(..., stdout=sys.stdout)`) is given 1 too. The processes
  fim starts on purpose (stdio MCP servers, hook commands, the sandbox's) get pipes of
  their own, so they are unaffected.

Inside a test's swapped streams (`tests/inprocess_cli.py`: stdout is a buffer, with no
descriptor) only the first layer applies, and it is taken down when the command ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any

LOGGER = "fim.hooks.output"
"""Where the project's prints are logged (below `fim.hooks`, where a hook's stderr is)."""

MAX_LINE = 500
"""The most of one printed line a log line shows (a hook's stderr shows as much)."""

MAX_PENDING = 8192
"""Characters of a line without its newline kept before they are logged anyway."""

SERVERS = frozenset({"serve", "worker"})
"""Commands whose stdout is a log, not an answer: fd 1 stays theirs."""

_TOOL: contextvars.ContextVar[str | None] = contextvars.ContextVar("fim_tool_call", default=None)
_local = threading.local()
"""`emitting`: this thread is logging a diverted line (a handler that writes to stdout
then writes to stderr, or a server's log, instead of coming back here)."""


@contextlib.contextmanager
def calling(tool: str) -> Iterator[None]:
    """While a Python tool `tool` runs: what it prints is its own, logged under its name
    (the context is copied into its worker thread and into the tasks it starts)."""
    token = _TOOL.set(tool)
    try:
        yield
    finally:
        _TOOL.reset(token)
        guard = sys.stdout
        if isinstance(guard, _Guard):
            guard.end_line(f"tool '{tool}'")


def _project_frame() -> str | None:
    """The hooks module (`weather`) of the nearest project frame on this thread's stack,
    or None. Nothing of the project's can run before its module loader is imported."""
    loader = sys.modules.get("fim.hooks.python_hooks")
    prefix = getattr(loader, "PACKAGE_PREFIX", None)
    if not isinstance(prefix, str):
        return None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str) and name.startswith(prefix):
            return name.partition(".")[2] or name
        frame = frame.f_back
    return None


def _writer() -> str | None:
    """Who is writing, when it is the project's code: `tool 'x'`, `hooks module 'y'`."""
    if getattr(_local, "emitting", False):
        return None
    tool = _TOOL.get()
    if tool is not None:
        return f"tool '{tool}'"
    module = _project_frame()
    return None if module is None else f"hooks module '{module}'"


class _Lines:
    """Text the project printed, logged a whole line at a time per writer and thread."""

    def __init__(self) -> None:
        self._pending: dict[tuple[int, str], str] = {}
        self._dropping: set[tuple[int, str]] = set()
        """Writers whose line passed `MAX_PENDING`: logged already, the rest of it dropped
        up to its newline (logged alone, a piece could begin with the end of a secret)."""
        self._lock = threading.Lock()

    def add(self, who: str, text: str) -> None:
        key = (threading.get_ident(), who)
        with self._lock:
            if key in self._dropping:
                _, newline, text = text.partition("\n")
                if not newline:
                    return
                self._dropping.discard(key)
            lines = (self._pending.pop(key, "") + text).split("\n")
            rest = lines.pop()
            if len(rest) > MAX_PENDING:  # masked whole, then cut (`_emit`), and no more
                lines.append(rest)
                self._dropping.add(key)
                rest = ""
            if rest:
                self._pending[key] = rest
        for line in lines:
            _emit(who, line)

    def end(self, who: str | None = None) -> None:
        """Log what is left without a newline: `who`'s (on any thread), or everyone's."""
        with self._lock:
            keys = [k for k in self._pending if who is None or k[1] == who]
            left = [(k[1], self._pending.pop(k)) for k in keys]
            self._dropping -= {k for k in self._dropping if who is None or k[1] == who}
        for writer, line in left:
            _emit(writer, line)


def _emit(who: str, line: str) -> None:
    line = line.rstrip("\r")
    if not line.strip():
        return
    # deferred: logging and the masking policy cost ms at every start; only a print needs them
    import logging

    from fim.masking import known

    _local.emitting = True
    try:
        masker = known()
        shown, cut = masker.head(line, MAX_LINE)
        logging.getLogger(LOGGER).info(
            "%s printed: %s%s", who, masker.text(shown), "..." if cut else ""
        )
    finally:
        _local.emitting = False


class _Guard:
    """`sys.stdout` while fim runs: the project's writes to the log, fim's to `inner`."""

    def __init__(self, inner: Any, private: bool, answers: bool) -> None:
        self._inner = inner
        self._private = private
        """`inner` is the private duplicate of fd 1 (fd 1 itself is stderr)."""
        self._answers = answers
        """stdout is the command's answer (any command but the servers, whose is a log)."""
        self._owner = threading.get_ident()
        """The command's thread: the only one whose unattributed writes may be fim's."""
        self.claimed = False
        """The command writes its answer to `inner` itself (`claim_stdout`): every write to
        the guard, from any thread, is the project's."""
        self._lines = _Lines()
        self._buffer: _BinaryGuard | None = None

    def who(self) -> str | None:
        """The project's code writing now, or None: fim's own write (or a log line of a
        diverted one: `emitting`)."""
        if getattr(_local, "emitting", False):
            return None
        who = _writer()
        if who is not None:
            return who
        if self.claimed or (self._answers and threading.get_ident() != self._owner):
            return f"thread '{threading.current_thread().name}'"
        return None

    def passing(self) -> Any:
        """Where a write that is not the project's goes: a log line written while a
        diverted one is logged goes to stderr when stdout is an answer (attack-56 F3)."""
        if self._answers and getattr(_local, "emitting", False):
            return sys.stderr
        return self._inner

    def write(self, text: str) -> int:
        who = self.who()
        if who is None:
            return int(self.passing().write(text))
        self.printed(who, text)
        return len(text)

    def printed(self, who: str, text: str) -> None:
        """`text` the project's code `who` wrote, logged by the line."""
        self._lines.add(who, text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.who() is None:
            self.passing().flush()

    def fileno(self) -> int:
        if self._private:
            return 1  # stderr by now: a child given "stdout" writes there (never the answer)
        return int(self._inner.fileno())

    def detach(self) -> Any:
        raise io.UnsupportedOperation("fim's stdout cannot be detached")

    @property
    def buffer(self) -> Any:
        if self._buffer is None:
            self._buffer = _BinaryGuard(self._inner.buffer, self)
        return self._buffer

    def end_line(self, who: str | None = None) -> None:
        self._lines.end(who)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _BinaryGuard:
    """`sys.stdout.buffer` of a `_Guard`: bytes the project writes there are its prints."""

    def __init__(self, inner: Any, text: _Guard) -> None:
        self._inner = inner
        self._text = text

    def write(self, data: Any) -> int:
        who = self._text.who()
        if who is None:
            passing = self._text.passing()
            if passing is self._text._inner:
                return int(self._inner.write(data))
            passing.write(bytes(data).decode("utf-8", "replace"))  # stderr: a log line
            return len(data)
        self._text.printed(who, bytes(data).decode("utf-8", "replace"))
        return len(data)

    def writelines(self, lines: Iterable[Any]) -> None:
        for data in lines:
            self.write(data)

    @property
    def raw(self) -> _BinaryGuard:
        """Itself: the unbuffered stream under it is the private descriptor's."""
        return self

    def fileno(self) -> int:
        return self._text.fileno()

    def detach(self) -> Any:
        raise io.UnsupportedOperation("fim's stdout cannot be detached")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _private_stdout(stdout: Any) -> Any:
    """A text stream on a private duplicate of fd 1 (fd 1 then points at stderr), or None
    when stdout is no descriptor (a test's buffer), a terminal, or cannot be moved."""
    try:
        if stdout.fileno() != 1 or os.isatty(1):
            return None
        stdout.flush()
        private = os.dup(1)  # not inherited by children: only fim writes there
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(private)
        return None
    return open(  # fim's stdout from now on, for the rest of the process
        private,
        "w",
        encoding=stdout.encoding,
        errors=stdout.errors,
        closefd=True,
    )


@contextlib.contextmanager
def guarded(command: str | None) -> Iterator[None]:
    """The two layers around the command `command` (`run`, `mcp`; None: no command). In
    a process of its own the fd layer stays until it exits (a thread the project left
    running may still print)."""
    before = sys.stdout
    if before is None or isinstance(before, _Guard):
        yield
        return
    private = None if command in SERVERS else _private_stdout(before)
    inner = private if private is not None else before
    guard = _Guard(inner, private=private is not None, answers=command not in SERVERS)
    sys.stdout = guard
    try:
        yield
    finally:
        guard.end_line()
        with contextlib.suppress(Exception):
            inner.flush()  # fim's answer (a claimed guard takes a flush for a print's)
        if private is None and sys.stdout is guard:
            sys.stdout = before


def answer_stdout() -> Any:
    """The stream fim's own answer goes to: the guard's (the private duplicate of fd 1, or
    the stdout it was put over), or `sys.stdout` when no guard is in place (a library
    call, a test's capture). Writing there is never taken for the project's."""
    guard = sys.stdout
    return guard._inner if isinstance(guard, _Guard) else guard


def claim_stdout() -> Any:
    """`answer_stdout()`, for a command whose every answer is written there (`fim run`,
    `fim eval --json -`, `fim mcp serve`): from now on until the command ends, every write
    to `sys.stdout`, from any thread, by any code, is the project's (logged, masked)."""
    guard = sys.stdout
    if isinstance(guard, _Guard):
        guard.claimed = True
    return answer_stdout()


__all__ = ["LOGGER", "MAX_LINE", "answer_stdout", "calling", "claim_stdout", "guarded"]
