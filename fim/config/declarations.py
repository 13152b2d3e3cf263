"""One declaration file's way in: `Declarations`, what a load holds, and the steps every
document takes whatever read it (parse with `${VAR}` interpolation, validate, register).

Kept apart from `fim.config.loader`, which walks the project's folders and caches files
between loads: other readers of project files (skills' SKILL.md, eval case files) build
on these steps without the folder walk, and the loader's import of them is one-way.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from fim.config.files import Read
from fim.config.interpolate import file_fingerprint, interpolate
from fim.config.problems import validation_problems
from fim.config.schema import (
    AgentDecl,
    Connector,
    EvalSuite,
    HookDecl,
    Project,
    WorkflowDecl,
)
from fim.config.yamlio import Document, YamlSyntaxError, parse, too_deep
from fim.errors import Problem
from fim.masking import config_secrets

PROJECT_FILE = "fim.yaml"
YAML_SUFFIXES = (".yaml", ".yml")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")

KIND_MODELS: dict[str, Any] = {
    "agent": AgentDecl,
    "connector": Connector,
    "workflow": WorkflowDecl,
    "hook": HookDecl,
    "eval": EvalSuite,
}
"""Kinds declared one per YAML file, with the type each file validates against."""

FOLDER_OF = {
    "agent": "agents",
    "connector": "connectors",
    "skill": "skills",
    "workflow": "workflows",
    "hook": "hooks",
    "eval": "evals",
}

_adapters: dict[str, TypeAdapter[Any]] = {}


@dataclass
class Entry:
    """One declaration that validated, with the document it came from (for positions)."""

    kind: str
    name: str
    decl: Any
    doc: Document


@dataclass
class Declarations:
    """Everything in the project's files, validated one file at a time, not yet linked."""

    root: Path
    project: Project
    project_doc: Document | None = None
    project_ok: bool = True
    entries: dict[str, dict[str, Entry]] = field(
        default_factory=lambda: {kind: {} for kind in FOLDER_OF}
    )
    broken: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in FOLDER_OF})
    """Names of files that exist but failed to validate (no 'unknown X' noise for them)."""
    partial: dict[str, dict[str, Entry]] = field(
        default_factory=lambda: {kind: {} for kind in FOLDER_OF}
    )
    """Broken files, validated again without their failing top-level keys: the checker
    reports what the rest names that does not exist (an unknown tool next to a typo'd key)
    in the same run, so one `fim validate` shows every problem. Never part of a snapshot."""
    python_hooks: set[str] = field(default_factory=set)
    """Module names of hooks/*.py."""
    skill_problems: dict[str, list[Problem]] = field(default_factory=dict)
    """Problems of skill folders, by folder: they fail only the agents that use the skill
    (at run time) and `fim validate`, not the whole project."""
    unavailable: dict[str, dict[str, list[Problem]]] = field(
        default_factory=lambda: {"connector": {}, "mcp": {}, "a2a": {}}
    )
    """Connectors, MCP servers and remote A2A agents (by name) that name an unset `${VAR}`
    without default: a secret not exported on this machine is not a broken project. Only
    the agents and workflows that use one fail (preflight); `fim validate` warns
    (`--strict`: fails)."""
    left_out: list[tuple[str, Problem]] = field(default_factory=list)
    """Models' settings of the declaration files whose `${VAR}` is unset where no model is
    called, as (setting, warning) (`fim.config.serving`); the loader adds them to fim.yaml's."""
    problems: list[Problem] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)
    digest: Any = field(default_factory=hashlib.sha256)
    env_key: int = field(
        default_factory=lambda: hash((frozenset(os.environ.items()), file_fingerprint(os.environ)))
    )
    """Interpolation reads the environment (and the files `*_FILE` variables name), so
    cached files are only valid under the same."""
    seen: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    raw: dict[str, Read] = field(default_factory=dict)
    """Bytes read by this load, with their stats (see `fim.config.files`)."""
    stats: dict[str, os.stat_result] = field(default_factory=dict)
    """Stats taken while listing folders, used once by the read that follows."""
    texts: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    """Text decoded by this load, by path, with the bytes it came from."""
    prompt_files: dict[str, str] = field(default_factory=dict)
    """Prompt files the agents' instructions include, as checked (`fim.build.prompt_files`):
    pinned in the snapshot, part of its version."""

    def folder(self, kind: str) -> str:
        return getattr(self.project.paths, FOLDER_OF[kind])

    def rel(self, path: str | Path) -> str:
        text, root = str(path), str(self.root)
        if text.startswith(root + os.sep):
            return text[len(root) + 1 :].replace(os.sep, "/")
        return Path(path).as_posix()

    # The public entry for a loader of another file format (skills/<name>/SKILL.md): the
    # same parsing, validation and registration a YAML file gets, one document at a time.
    def parse(
        self, text: str, rel: str, line_offset: int = 0, expand: bool = True
    ) -> Document | None:
        """Parse YAML text read from `rel`; a syntax error is recorded and None returned
        (`expand=False` leaves `${...}` as text)."""
        return parse_doc(self, text, rel, line_offset=line_offset, expand=expand)

    def validate(self, doc: Document, kind: str, model: Any) -> Any:
        """Validate `doc.data` as `model`; problems are recorded and None returned."""
        return validate_doc(self, doc, kind, model)

    def register(self, kind: str, name: str, decl: Any, doc: Document) -> None:
        """Add a validated declaration (a duplicate or bad name is recorded, not raised)."""
        register_entry(self, Entry(kind, name, decl, doc))


def parse_doc(
    decls: Declarations,
    text: str,
    rel: str,
    line_offset: int = 0,
    secrets: set[str] | None = None,
    expand: bool = True,
    keep_unset: bool = False,
) -> Document | None:
    """Parse one YAML document; `expand=False` leaves `${...}` as text (skill front matter,
    written for other tools too, has no field declared to take interpolation).
    `keep_unset=True` leaves unset variables in `doc.unset` for the caller to place (a
    connector's make it unavailable); otherwise they are problems.

    A RecursionError is a problem of the file like a syntax error: the parse is capped at
    `MAX_DEPTH` levels, but it and the walks after it recurse, so a caller already deep in
    its own stack could still hit the limit, and a traceback would stop the whole load."""
    found = decls.secrets if secrets is None else secrets
    try:
        doc = parse(text, rel, line_offset=line_offset)
        # A value holds `${` only if the text does or spells it with a double-quoted escape.
        if expand and ("${" in text or "\\" in text):
            interpolate(doc, found)
        found |= config_secrets(doc.data)  # literal credentials and DSN passwords
    except (YamlSyntaxError, RecursionError) as raised:
        exc = raised if isinstance(raised, YamlSyntaxError) else too_deep()
        decls.problems.append(
            Problem(rel, exc.line + line_offset, exc.column, exc.message, exc.hint)
        )
        return None
    decls.problems.extend(doc.problems)
    doc.problems = []
    if not keep_unset:
        decls.problems.extend(problem for _, problem in doc.unset)
        doc.unset = []
    return doc


def validate_doc(decls: Declarations, doc: Document, kind: str, model: Any) -> Any:
    """Validate `doc.data`; problems are recorded and None returned on failure."""
    what = "the project" if kind == "project" else f"{kind} fields"
    if doc.data is None:
        decls.problems.append(doc.problem((), f"empty file (expected a mapping of {what})"))
        return None
    if not isinstance(doc.data, dict):
        got = type(doc.data).__name__.replace("str", "a string").replace("list", "a list")
        decls.problems.append(
            doc.problem(
                (),
                f"expected a mapping of {what}, got {got}",
                "write `key: value` lines at the top level",
            )
        )
        return None
    try:
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model.model_validate(doc.data)
        adapter = _adapters.get(kind) or _adapters.setdefault(kind, TypeAdapter(model))
        return adapter.validate_python(doc.data)
    except ValidationError as exc:
        decls.problems.extend(validation_problems(exc, model, doc))
        return None


def register_entry(decls: Declarations, entry: Entry) -> None:
    kind, name, doc = entry.kind, entry.name, entry.doc
    if not NAME_RE.match(name):
        decls.problems.append(
            doc.problem(
                ("name",),
                f"invalid {kind} name '{name}'",
                "use letters, digits, '_' and '-' (at most 64 characters)",
            )
        )
        decls.broken[kind].add(name)
        return
    existing = decls.entries[kind].get(name)
    if existing is not None:
        line, col = existing.doc.position(("name",))
        decls.problems.append(
            doc.problem(
                ("name",),
                f"duplicate {kind} name '{name}'",
                f"also declared at {existing.doc.path}:{line}:{col}; rename one",
            )
        )
        return
    decls.entries[kind][name] = entry
