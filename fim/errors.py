"""The two error families of fim.

`ConfigError` is about the user's files and always knows where (path, line, column) and,
where we can tell, a hint. `RunError` is something that failed while running. Only the CLI
turns them into exit codes; the library raises, the surfaces render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One thing wrong in the user's project, rendered as `path:line:col: message (hint)`."""

    path: str
    line: int
    column: int
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}:{self.column}"
        return f"{where}: {self.message}" + (f" ({self.hint})" if self.hint else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "hint": self.hint,
        }


class FimError(Exception):
    """Base of every error fim raises on purpose."""


@dataclass
class ConfigError(FimError):
    """One or more problems in the user's files. Carries all of them, never just the first."""

    problems: list[Problem] = field(default_factory=list)
    snapshot: Any = field(default=None, repr=False, compare=False)
    """The snapshot the compile built before it found the problems (`fim.build.compile`),
    or None: its warnings (a connector unavailable for an unset `${VAR}`) may explain them,
    so `fim validate` prints them too (newcomer-52 #1)."""

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)

    @classmethod
    def at(
        cls,
        path: str | Path,
        message: str,
        line: int = 1,
        column: int = 1,
        hint: str | None = None,
    ) -> ConfigError:
        return cls([Problem(str(path), line, column, message, hint)])


class ProjectNotFound(ConfigError):
    """No fim.yaml where a command looked. A ConfigError (callers that fall back on it
    catch it so), but about no file, since there is none: the CLI says it as one
    `error: no fim.yaml in DIR or its parents (hint)` line, never at `fim.yaml:1:1`."""

    def __init__(self, message: str, hint: str) -> None:
        self.message, self.hint = message, hint
        super().__init__([Problem("fim.yaml", 1, 1, message, hint)])

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})"


class RunError(FimError):
    """Something failed while running (model unreachable, missing API key, unknown agent)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message + (f" ({hint})" if hint else ""))


class Unavailable(RunError):
    """A run refused because something its agent needs is not configured where it runs (a
    connector or MCP server whose `${VAR}` is unset here): the server's configuration, not
    the request, so a served run answers 503 with `code` and is not retried (newcomer-52
    #5), as a missing model key answers `model_not_configured`."""

    def __init__(
        self, message: str, *, hint: str | None = None, code: str = "connector_unavailable"
    ) -> None:
        super().__init__(message, hint=hint)
        self.code = code


class Abandoned(RunError):
    """fim stopped waiting for a model request the endpoint had (its `timeout` passed): the
    provider may have generated, and billed, up to the request's `max_tokens` (budgets
    count it so, `fim.run.limits.abandoned`)."""
