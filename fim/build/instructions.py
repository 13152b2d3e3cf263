"""An agent's `instructions` as a Jinja2 template: one environment for `fim validate` and runs.

Both render with the same sandboxed environment, the same context (`project`, `agent`,
`env`, `now`) and the same strict rules, so whatever `fim validate` accepts renders at run
time, and a mistake is a `file:line:col` problem, not a traceback halfway through a run:

- an undefined name *or attribute* is an error (`{{ project.nam }}` does not render
  empty), worded with a did-you-mean: `'projct' is undefined (did you mean 'project'?)`;
- `env` holds only the variables of fim.yaml's `env_allowlist` (unset ones are "");
- `{% include %}`, `{% import %}` and `{% extends %}` read files of the project
  (`prompts/system.md`), so long prompts can live in files. The loader is the one way a
  template reaches the disk, and it refuses what a prompt must never carry: a path
  outside the project (`..`, or a symlink out of it), a hidden file or folder (`.env`,
  `.git`, `.fim` with the state store), the agents' own sandbox folder (a file an agent
  wrote must not become the next run's instructions), anything but a regular file (a
  FIFO would block the run), a file over `MAX_PROMPT_BYTES`, and text that is not UTF-8.
- they render on the event loop, so with the guarded environment workflow templates use
  (`fim.config.template_guards`): bounded in what they build, write, loop over and take
  time for; a template past a limit fails the run (and `fim validate`) naming the limit.
  Prompt files are read when a run starts (an edit applies to the next run) and checked
  by `fim validate`; they are not part of the snapshot's version.

Instructions made only of `{{ a.b }}` expressions (most projects) are checked from the
names they read (`fim.config.templates.PlainRefs`), without importing Jinja.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fim.build.instruction_time import NOW_HINT, Now, instructions_now
from fim.build.prompt_files import (
    MAX_PROMPT_BYTES,
    PROMPT_LINE,
    error_where,
    mistake_column,
    plain_where,
    project_loader,
)
from fim.config import template_guards
from fim.config.claude_memory import as_text_hint
from fim.config.problems import suggest
from fim.config.template_guards import guarded_environment
from fim.config.templates import PlainRefs
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.declarations import Entry
    from fim.config.schema import AgentDecl, Project

CONTEXT_NAMES = ("project", "agent", "env", "now")
"""What instructions may read."""
_FIELDS = {"project": ("name", "description"), "agent": ("name", "description")}
_SEP = "\x00"
"""Separates a message from its hint inside one Jinja error message."""


class InstructionsError(Exception):
    """Instructions that cannot render: `message`, a `hint`, and where in the template."""

    def __init__(self, message: str, hint: str | None = None, where: str = "") -> None:
        self.message = message
        self.hint = hint
        self.where = where
        super().__init__(message + (f" ({hint})" if hint else ""))

    @property
    def text(self) -> str:
        """`instructions: <message>[ at <where>]`, the problem's message."""
        return f"instructions: {self.message}" + (f" at {self.where}" if self.where else "")


@dataclass(frozen=True)
class Known:
    """What the context offers besides its values: the allowlisted variables."""

    env: tuple[str, ...]


def _missing(name: str, owner: str | None, known: Known) -> tuple[str, str | None]:
    """(message, hint) for `owner.name` (or `name` alone) not being defined."""
    if owner is None:
        hint = suggest(name, CONTEXT_NAMES) or ""
        if not hint.startswith("did you mean"):
            hint = f"instructions can read {', '.join(CONTEXT_NAMES)}"
        return f"'{name}' is undefined", hint
    if owner == "env":
        close = (suggest(name, known.env) if known.env else None) or ""
        if close.startswith("did you mean"):
            return f"'env' has no variable '{name}'", close
        listed = ", ".join(known.env) or "none yet"
        return f"'env' has no variable '{name}'", (
            f"add {name} to env_allowlist in fim.yaml; instructions see only the variables "
            f"listed there: {listed}"
        )
    fields = _FIELDS.get(owner, ())
    return f"'{owner}' has no attribute '{name}'", suggest(name, fields, f"{owner} fields")


def check_plain(refs: PlainRefs, known: Known) -> InstructionsError | Literal[True] | None:
    """The first undefined name among `{{ a.b }}` references, found without Jinja; None
    when all are defined; True when one reads deeper than the context's own names
    (`now.year`, `project.name.upper`), which only rendering decides."""
    for name in refs.names:
        head = name[0]
        if head not in CONTEXT_NAMES:
            return InstructionsError(*_missing(head, None, known))
        if len(name) < 2:
            continue
        if head == "env" and name[1] not in known.env:
            return InstructionsError(*_missing(name[1], "env", known))
        if head in _FIELDS and name[1] not in _FIELDS[head]:
            return InstructionsError(*_missing(name[1], head, known))
        if head == "now" or len(name) > 2:
            return True
    return None


# ---------------------------------------------------------------------- the environment


@functools.cache
def _jinja() -> tuple[type[Any], type[Any], type[Exception], type[Any]]:
    """(Undefined, loader, missing-value error, namespace) classes, built on first use:
    `fim validate` of plain instructions never imports Jinja."""
    # deferred: loading jinja2 costs tens of ms
    from jinja2 import StrictUndefined
    from jinja2.exceptions import TemplateRuntimeError, UndefinedError
    from jinja2.utils import missing

    class Namespace(dict[str, Any]):
        """`project`, `agent` or `env`: a dict that knows its name, for the wording."""

        def __init__(self, label: str, values: Mapping[str, Any], known: Known) -> None:
            super().__init__(values)
            self._fim_label = label  # underscored: the sandbox never shows it to a template
            self._fim_known = known

    class Missing(UndefinedError):
        """An undefined value was used; carries the did-you-mean hint apart."""

        def __init__(self, message: str | None = None) -> None:
            text, _, hint = (message or "").partition(_SEP)
            super().__init__(text)
            self.hint = hint or None

    class Undefined(StrictUndefined):
        """StrictUndefined that words the miss with the names the context has."""

        __slots__ = ()

        def __init__(
            self,
            hint: str | None = None,
            obj: Any = missing,
            name: str | None = None,
            exc: type[TemplateRuntimeError] = Missing,
        ) -> None:
            super().__init__(hint, obj, name, exc)

        @property
        def _undefined_message(self) -> str:
            obj, name = self._undefined_obj, self._undefined_name
            if self._undefined_hint or not isinstance(name, str):
                return str(super()._undefined_message)
            if obj is missing:
                message, hint = _missing(name, None, Known(()))
            elif isinstance(obj, Now):  # `now.strftime(...)`: it is text, not a datetime
                message, hint = f"'now' has no attribute '{name}'", NOW_HINT
            elif isinstance(obj, Namespace):
                message, hint = _missing(name, obj._fim_label, obj._fim_known)
            else:
                return str(super()._undefined_message)
            return message + _SEP + (hint or "")

    return Undefined, project_loader(), Missing, Namespace


_ENVIRONMENTS: dict[tuple[str, str, str | None], Any] = {}
_TEMPLATES: dict[tuple[int, str], tuple[Any, Any]] = {}


def _sandbox(root: Path, project: Project) -> Path:
    folder = Path(project.sandbox)
    return (folder if folder.is_absolute() else root / folder).resolve()


def _written_by_agents(root: Path, project: Project) -> tuple[Path, ...]:
    """The folders agents write: the sandbox folder, and beside it `<sandbox>-keys`, where
    each API key's runs write (`fim.tools.builtin._common`): a file there is a model's."""
    sandbox = _sandbox(root, project)
    return sandbox, sandbox.parent / f"{sandbox.name}-keys"


def environment(
    root: Path, project: Project, pinned: Mapping[str, str] | None = None, version: str = ""
) -> Any:
    """The guarded sandboxed environment for instructions of the project at `root`: one per
    root, sandbox folder and snapshot `version`, whose loader serves the snapshot's `pinned`
    prompt files and no other (a name the compile did not read is not found: runs never read
    the disk)."""
    key = (str(root), project.sandbox, version if pinned is not None else None)
    env = _ENVIRONMENTS.get(key)
    if env is None:
        undefined, loader, _, _ = _jinja()
        env = guarded_environment(
            undefined=undefined,
            autoescape=False,
            loader=loader(root, _written_by_agents(root, project), pinned),
            auto_reload=True,
        )
        if len(_ENVIRONMENTS) > 64:
            _ENVIRONMENTS.clear()
        _ENVIRONMENTS[key] = env
    return env


def reading_environment(root: Path, project: Project, read: dict[str, str]) -> Any:
    """A fresh environment that reads every prompt file from the disk and records it in
    `read` (the compile's check, which pins them): no template cache to skip a read."""
    undefined, loader, _, _ = _jinja()
    return guarded_environment(
        undefined=undefined,
        autoescape=False,
        loader=loader(root, _written_by_agents(root, project), None, read),
        cache_size=0,
    )


def render(
    root: Path,
    project: Project,
    agent: AgentDecl,
    env: Mapping[str, str],
    now: str,
    jinja: Any = None,
) -> str:
    """The agent's instructions rendered in `jinja` (default: the environment reading the
    disk), raising InstructionsError, never a traceback."""
    text = agent.instructions
    if "{" not in text:
        return text.strip()
    jinja = jinja or environment(root, project)
    _, _, missing_error, namespace = _jinja()
    known = Known(tuple(project.env_allowlist))
    context = {
        "project": namespace(
            "project", {"name": project.name, "description": project.description}, known
        ),
        "agent": namespace("agent", {"name": agent.name, "description": agent.description}, known),
        "env": namespace("env", env, known),
        "now": Now(now),
    }
    # deferred: loading jinja2 costs tens of ms
    from jinja2 import TemplateError, TemplateNotFound, TemplateSyntaxError

    try:
        key = (id(jinja), text)
        cached = _TEMPLATES.get(key)
        if cached is not None and cached[0] is jinja:
            template = cached[1]
        else:  # compiled once per text: every run of the agent renders it
            template = jinja.from_string(text)
            if len(_TEMPLATES) > 1024:
                _TEMPLATES.clear()
            _TEMPLATES[key] = (jinja, template)
        return template_guards.render(template, context).strip()
    except missing_error as exc:
        raise InstructionsError(
            str(exc), getattr(exc, "hint", None), error_where(exc, text)
        ) from None
    except TemplateNotFound as exc:
        raise InstructionsError(
            exc.message or f"no file '{exc.name}' in the project",
            "paths are relative to the project root, e.g. prompts/system.md",
            error_where(exc, text),
        ) from None
    except TemplateSyntaxError as exc:
        raise InstructionsError(
            f"invalid Jinja2 template: {exc.message}",
            "check {{ }} / {% %} pairs and filter names",
            error_where(exc, text),
        ) from None
    except TemplateError as exc:  # the sandbox or the loader refused something
        raise InstructionsError(str(exc.message or exc), None, error_where(exc, text)) from None
    except RecursionError:
        raise InstructionsError(
            "templates include each other without end",
            "does a prompt file include itself, or a macro call itself?",
        ) from None
    except Exception as exc:  # `{{ 1 / 0 }}`, a filter given the wrong type
        raise InstructionsError(
            f"{type(exc).__name__}: {exc}", None, error_where(exc, text)
        ) from None


def render_for_run(
    root: Path,
    project: Project,
    agent: AgentDecl,
    pinned: Mapping[str, str] | None = None,
    version: str = "",
    jinja: Any = None,
) -> str:
    """`render` with this process's allowlisted variables and the current time (or the
    one a `fim.build.instruction_time.rendering_time` block chose), from the snapshot's
    `pinned` prompt files when given (a run), else from the disk."""
    allowed = {k: os.environ.get(k, "") for k in project.env_allowlist}
    now = instructions_now()
    if jinja is None and pinned is not None:
        jinja = environment(root, project, pinned, version)
    return render(root, project, agent, allowed, now, jinja)


# ---------------------------------------------------------------------- fim validate


def check_instructions(checker: Any, entry: Entry) -> None:
    """Report the agent's instructions that would not render, at their value in the
    file: a syntax error (the checker's template parse), an undefined name or attribute,
    a prompt file that cannot be included. `checker` is `fim.build.checks.Checker`."""
    agent: AgentDecl = entry.decl
    ast = checker.templates.check(checker, entry, ("instructions",), agent.instructions)
    if ast is None:  # no template, or a syntax error the parse reported
        return
    decls = checker.decls
    project = decls.project
    found = (
        check_plain(ast, Known(tuple(project.env_allowlist)))
        if isinstance(ast, PlainRefs)
        else True
    )
    if isinstance(found, InstructionsError) and not found.where:
        found.where = plain_where(agent.instructions, found.message)
    read: dict[str, str] = {}
    if found is True:  # not plain: render it, includes and all, pinning what it read
        try:
            render_for_run(
                decls.root, project, agent, jinja=reading_environment(decls.root, project, read)
            )
            found = None
        except InstructionsError as exc:
            found = exc
        for name in sorted(read):
            if decls.prompt_files.setdefault(name, read[name]) is read[name]:
                decls.digest.update(f"prompt:{name}\0{read[name]}\0".encode())
    if isinstance(found, InstructionsError):
        at = entry.doc.problem(("instructions",), found.text, found.hint)
        in_file = PROMPT_LINE.fullmatch(found.where)
        if in_file is not None and in_file["file"] != "template":  # at the mistake, not the include
            included = f"included from {at.path}:{at.line}"
            # a `{{customer.name}}` of another template language in CLAUDE.md: the way out
            raw = as_text_hint(found.message, found.hint)
            hint = "; ".join(h for h in (found.hint, raw, included) if h)
            message = f"instructions: {found.message}"
            line = int(in_file["line"])
            at = Problem(
                in_file["file"],
                line,
                mistake_column(read.get(in_file["file"], ""), line, found.message),
                message,
                hint,
            )
        elif in_file is not None:  # `template line N`: in a `|` block, that line of the file
            block = entry.doc.block_line(
                ("instructions",), int(in_file["line"]), agent.instructions
            )
            if block is not None:
                text, line = entry.doc.text, block[0] - entry.doc.line_offset
                col = mistake_column(text, line, found.message)
                message = f"instructions: {found.message}"
                at = Problem(at.path, block[0], block[1] if col == 1 else col, message, found.hint)
        checker.add(at)


def reads_files(agent: AgentDecl) -> bool:
    """Whether the instructions may include files (their check reads the disk)."""
    return "{%" in agent.instructions


__all__ = [
    "CONTEXT_NAMES",
    "MAX_PROMPT_BYTES",
    "InstructionsError",
    "check_instructions",
    "environment",
    "reads_files",
    "render",
    "render_for_run",
]
