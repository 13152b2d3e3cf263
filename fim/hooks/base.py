"""The classes a hook is made of: what users subclass in hooks/*.py and builtins extend.

A hook is an object with a point, a matcher, a priority and an async `__call__(context)`
returning a `HookResult`. Users write

    class RedactEmails(PostToolUseHook):
        async def __call__(self, context: HookContext) -> HookResult: ...

and get the options of `with:` as constructor keyword arguments. The runner binds the
run (`self.run_context`) after construction, so a hook can reach the snapshot, the agent
declaration and the long-lived services without a global.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from fim.types import HookContext, HookPoint, HookResult

if TYPE_CHECKING:
    from fim.events import Notice
    from fim.run.services import RunContext

log = logging.getLogger("fim.hooks")

MAX_REASON_CHARS = 4_000
"""The most of a hook's block reason (or a side effect it reports) that goes on, to the
model, the events and the store: a sentence, not a document. A hook that echoes the call's
arguments in its reason (`echo "blocked: $cmd" >&2`) would otherwise let the model choose
its size; what a hook puts in its rewrite or its added context is bounded like a tool
result (MAX_OBSERVATION_CHARS)."""

POINTS: tuple[HookPoint, ...] = ("SessionStart", "PreToolUse", "PostToolUse")


class HookBuildError(Exception):
    """A hook declaration that cannot become a hook; turned into a Problem or a blocker."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message + (f" ({hint})" if hint else ""))


def compile_matcher(pattern: str | None) -> Callable[[str | None], bool]:
    """Turn a matcher into a predicate on the tool name.

    Globs (`crm__*`), `re:` regexes (searched, so anchor with `^` when needed) and Claude
    Code's matchers (regexes matched against the whole name: `Edit|Write`, `mcp__.*`,
    `Notebook.*`) are all accepted — a plain matcher fires when either its glob or its
    Claude Code reading matches; none, `""` and `*` match everything. Raises `re.error` for
    a bad `re:` regex so declarations fail at compile time.
    """
    if pattern is None or pattern.strip() in ("", "*"):
        return lambda name: True
    if pattern.startswith("re:"):
        regex = re.compile(pattern[3:])
        return lambda name: name is not None and regex.search(name) is not None
    alternatives = [p.strip() for p in pattern.split("|") if p.strip()]
    try:
        claude: re.Pattern[str] | None = re.compile(pattern.strip())
    except re.error:
        claude = None

    def match(name: str | None) -> bool:
        if name is None:
            return False
        if any(fnmatch.fnmatchcase(name, p) for p in alternatives):
            return True
        return claude is not None and claude.fullmatch(name) is not None

    return match


class BaseHook:
    """Common machinery of every hook; subclass one of the three point classes instead."""

    point: ClassVar[HookPoint]
    also: ClassVar[tuple[HookPoint, ...]] = ()
    """Further points the hook observes (audit_log times a call from Pre to Post)."""
    Options: ClassVar[type[BaseModel] | None] = None
    """A pydantic model (extra="forbid") validating `with:`; None passes options through."""

    matcher: str | None = None
    priority: int = 100
    timeout: float = 30.0
    optional: bool = False
    """Only for SessionStart: a failure lets the session start without the hook."""
    name: str = ""
    run_context: RunContext | None = None

    def __init__(self, **options: Any) -> None:
        self.options: Any = self.Options(**options) if self.Options is not None else options
        self.name = self.name or type(self).__name__
        self._match = compile_matcher(self.matcher)
        self._notify: Callable[[Notice], None] | None = None

    # ------------------------------------------------------------------ runner API

    @property
    def points(self) -> tuple[HookPoint, ...]:
        return (self.point, *self.also)

    def set_matcher(self, pattern: str | None) -> None:
        self.matcher = pattern
        self._match = compile_matcher(pattern)

    def matches(self, tool_name: str | None) -> bool:
        """No name (a SessionStart without a `source`) always matches; otherwise the
        matcher decides (a tool's names, or SessionStart's `startup`/`resume`)."""
        if tool_name is None:
            return True
        match = getattr(self, "_match", None) or compile_matcher(self.matcher)
        return match(tool_name)

    def chain_timeout(self) -> float:
        """Seconds the runner allows one call of this hook before blocking (fail closed)."""
        return self.timeout

    async def __call__(self, context: HookContext) -> HookResult:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")

    async def finish(self, context: HookContext, result: HookResult) -> None:
        """Called after every hook of the point has run, with the merged result.

        Lets a hook act on the chain's outcome (audit the block a later hook decided);
        most hooks do not need it, so the default does nothing.
        """
        return None

    # ------------------------------------------------------------------ helpers for hooks

    def notice(self, message: str, **data: Any) -> None:
        """Tell the person running the agent something now (a pending approval), before the
        hook's decision lands in the trace."""
        log.warning(message)
        if self._notify is not None:
            # deferred: loading fim.events costs tens of ms
            from fim.events import Notice

            run_id = self.run_context.run_id if self.run_context is not None else ""
            self._notify(Notice(run_id=run_id, message=message, data=data))

    @staticmethod
    def allow(**changes: Any) -> HookResult:
        return HookResult(**changes)

    @staticmethod
    def block(reason: str, **changes: Any) -> HookResult:
        return HookResult(allow=False, error=reason, **changes)


class HookFailed(HookResult):
    """The answer of a hook that could not decide: it raised, timed out, returned no
    `HookResult`, its command failed (an exit code other than 0 and 2) or could not be
    given its input (a transcript fim could not write). The call is blocked all the same
    (hooks fail closed), but no policy blocked it: its event says `failed`, the log has a
    WARNING with the run id and the reason, and `fim_hook_failures_total` counts it, not
    `fim_hook_blocks_total` (newcomer-52 #2)."""

    allow: bool = False


class SessionStartHook(BaseHook):
    """Runs before the first model call; may add `additional_context` to the system prompt
    or block the session."""

    point: ClassVar[HookPoint] = "SessionStart"


class PreToolUseHook(BaseHook):
    """Runs after the model picked a tool and before it runs; may block or rewrite args."""

    point: ClassVar[HookPoint] = "PreToolUse"


class PostToolUseHook(BaseHook):
    """Runs after the tool returned and before the model sees it; may rewrite the result."""

    point: ClassVar[HookPoint] = "PostToolUse"
