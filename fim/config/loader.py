"""Files -> Declarations: find the project, read every folder, validate every file.

The loader never stops at the first problem: each file is read, parsed, interpolated and
validated on its own, and every problem (with `path:line:col`) is collected so one
`fim validate` run shows the user everything that is wrong. Cross-references between
files are the compiler's job (`fim.build.compile`); this module only knows single files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from fim.config.files import Read, keep_reads, keep_texts, list_files, read_text
from fim.config.interpolate import interpolate, passed_through
from fim.config.problems import validation_problems
from fim.config.schema import (
    AgentDecl,
    Connector,
    EvalSuite,
    HookDecl,
    Project,
    WorkflowDecl,
)
from fim.config.skill_files import load_skills
from fim.config.yamlio import Document, YamlSyntaxError, parse, too_deep
from fim.errors import ConfigError, Problem
from fim.masking import Masker, config_secrets

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
        default_factory=lambda: {"connector": {}, "mcp": {}}
    )
    """Connectors and MCP servers (by name) that name an unset `${VAR}` without default:
    a secret not exported on this machine is not a broken project. Only the agents and
    workflows that use one fail (preflight); `fim validate` warns (`--strict`: fails)."""
    problems: list[Problem] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)
    digest: Any = field(default_factory=hashlib.sha256)
    env_key: int = field(default_factory=lambda: hash(frozenset(os.environ.items())))
    """Interpolation reads the environment, so cached files are only valid under the same."""
    seen: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    raw: dict[str, Read] = field(default_factory=dict)
    """Bytes read by this load, with their stats (see `fim.config.files`)."""
    stats: dict[str, os.stat_result] = field(default_factory=dict)
    """Stats taken while listing folders, used once by the read that follows."""
    texts: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    """Text decoded by this load, by path, with the bytes it came from."""

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
        return _parse(self, text, rel, line_offset=line_offset, expand=expand)

    def validate(self, doc: Document, kind: str, model: Any) -> Any:
        """Validate `doc.data` as `model`; problems are recorded and None returned."""
        return _validate(self, doc, kind, model)

    def register(self, kind: str, name: str, decl: Any, doc: Document) -> None:
        """Add a validated declaration (a duplicate or bad name is recorded, not raised)."""
        _register(self, Entry(kind, name, decl, doc))


def find_root(start: str | Path | None = None) -> Path:
    """The project root: `start` itself when given, else the nearest parent with fim.yaml."""
    if start is not None:
        root = Path(start).expanduser().resolve()
        if not (root / PROJECT_FILE).is_file():
            raise ConfigError.at(
                root / PROJECT_FILE,
                f"no {PROJECT_FILE} in {root}",
                hint="pass the directory that holds fim.yaml, or run `fim init DIR`",
            )
        return root
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate
    raise ConfigError.at(
        PROJECT_FILE,
        f"no {PROJECT_FILE} found in {here} or any parent directory",
        hint="cd into a fim project, pass --project DIR, or run `fim init DIR`",
    )


def load(root: str | Path) -> Declarations:
    """Read and validate every file of the project at `root`; problems are collected."""
    root = Path(root).resolve()
    decls = Declarations(root=root, project=Project())
    _load_project(decls)
    for kind in ("agent", "connector", "workflow", "hook", "eval"):
        for path, problem in list_files(decls, root / decls.folder(kind), YAML_SUFFIXES):
            if problem is not None:
                decls.problems.append(problem)
                decls.broken[kind].add(_stem(path))
            elif not (kind == "eval" and "." in _stem(path)):
                # evals/<name>.<tag>.yaml (demo.script.yaml, x.cassette.yaml) is data
                _load_file(decls, kind, path)
    for path, problem in list_files(decls, root / decls.folder("hook"), (".py",)):
        if problem is not None:
            decls.problems.append(problem)
        else:
            decls.python_hooks.add(_stem(path))
    load_skills(decls)
    decls.problems = mask_problems(decls.problems, decls.secrets)
    _CACHE.clear()
    _CACHE.update(decls.seen)
    keep_reads(decls.raw)
    keep_texts(decls.texts)
    return decls


def mask_problems(problems: list[Problem], secrets: set[str]) -> list[Problem]:
    """Problems with every secret masked (`fim.masking`): values from `${VAR}` may end up
    in messages, e.g. "expected an integer, got '...'"."""
    if not secrets:
        return problems
    masker = Masker(secrets)
    return [
        Problem(
            p.path,
            p.line,
            p.column,
            masker.text(p.message),
            masker.text(p.hint) if p.hint is not None else None,
        )
        for p in problems
    ]


def _stem(path: str | Path) -> str:
    name = os.path.basename(path)
    for suffix in (*YAML_SUFFIXES, ".py"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _parse(
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


def _validate(decls: Declarations, doc: Document, kind: str, model: Any) -> Any:
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


def _load_project(decls: Declarations) -> None:
    path = decls.root / PROJECT_FILE
    text = read_text(decls, path)
    doc = _parse(decls, text, PROJECT_FILE, keep_unset=True) if text is not None else None
    decls.project_doc = doc
    if doc is None:
        decls.project_ok = False
        return
    _unset_servers(decls, doc)
    if doc.data is None:
        doc.data = {}
    if isinstance(doc.data, dict):
        doc.data.setdefault("name", decls.root.name)
    project = _validate(decls, doc, "project", Project)
    if project is None:
        decls.project_ok = False
        paths = doc.data.get("paths") if isinstance(doc.data, dict) else None
        if isinstance(paths, dict):
            with contextlib.suppress(ValidationError):
                decls.project = Project.model_validate({"paths": paths})
        return
    decls.project = project


def _unset_servers(decls: Declarations, doc: Document) -> None:
    """Place fim.yaml's unset variables: one under `mcp_servers.<name>` makes that server
    unavailable (recorded in `decls.unavailable`; the snapshot leaves it out, so nothing
    starts it with "" for a secret); any other is a problem of the project."""
    for path, problem in doc.unset:
        if len(path) > 2 and path[0] == "mcp_servers" and isinstance(path[1], str):
            decls.unavailable["mcp"].setdefault(path[1], []).append(problem)
        else:
            decls.problems.append(problem)
    doc.unset = []


_Parsed = tuple[Any, Any, list[Problem], set[str], Any]
_CACHE: dict[tuple[Any, ...], _Parsed] = {}
"""Parsed and validated declaration files of the previous load, by (environment, kind,
path, text). A reload of a 1,000-agent project re-reads every file but parses and
validates only the ones that changed; entries not seen in a load are dropped."""


def _load_file(decls: Declarations, kind: str, path: str | Path) -> None:
    rel, stem = decls.rel(path), _stem(path)
    text = read_text(decls, path, rel)
    if text is None:
        decls.broken[kind].add(stem)
        return
    key = (decls.env_key, kind, rel, text)
    parsed = _CACHE.get(key)
    if parsed is None:
        problems_before, secrets = len(decls.problems), set[str]()
        doc = _parse(decls, text, rel, secrets=secrets, keep_unset=kind == "connector")
        if doc is not None and isinstance(doc.data, dict):
            doc.data.setdefault("name", stem)
        decl = _validate(decls, doc, kind, KIND_MODELS[kind]) if doc is not None else None
        if decl is not None:
            passed_through(_passed_names(kind, decl), secrets)
        if doc is not None and doc.unset:
            _drop_unset_echoes(decls, doc, problems_before)
        partial = _partial(doc, kind) if decl is None and doc is not None else None
        parsed = (doc, decl, decls.problems[problems_before:], secrets, partial)
    else:
        doc, decl, problems, secrets, partial = parsed
        decls.problems.extend(problems)
    decls.secrets |= parsed[3]
    decls.seen[key] = parsed
    if decl is None or doc is None:  # no document, no declaration
        name = doc.data.get("name") if doc is not None and isinstance(doc.data, dict) else None
        decls.broken[kind].add(name if isinstance(name, str) else stem)
        if partial is not None and doc is not None:
            decls.partial[kind][partial.name] = Entry(kind, partial.name, partial, doc)
        if doc is not None and doc.unset:  # the variables too: every problem at once
            decls.problems.extend(problem for _, problem in doc.unset)
        return
    if doc.unset:
        decls.unavailable[kind][decl.name] = [problem for _, problem in doc.unset]
    _register(decls, Entry(kind, decl.name, decl, doc))


_PARTIAL_KINDS = ("agent", "workflow", "hook", "eval")
"""Kinds whose failing files are checked for references too (`Declarations.partial`); a
connector's top level is a tagged union, whose errors do not name one key to leave out."""


def _partial(doc: Document, kind: str) -> Any:
    """The declaration of a file that failed validation, without the top-level keys that
    failed (defaults in their place), or None when that does not validate either (a
    required key failed). Paths stay the file's, so positions stay right."""
    model = KIND_MODELS[kind]
    if kind not in _PARTIAL_KINDS or not isinstance(doc.data, dict):
        return None
    data = dict(doc.data)
    for _ in range(3):
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            failed = {err["loc"][0] for err in exc.errors() if err["loc"]}
            if not failed & set(data) or "name" in failed:
                return None
            data = {k: v for k, v in data.items() if k not in failed}
        except (TypeError, ValueError):
            return None
    return None


def _drop_unset_echoes(decls: Declarations, doc: Document, start: int) -> None:
    """Drop the schema problems at a value an unset variable emptied (`base_url: ${URL}`
    gives "" and a "not a URL" problem): the unset variable is the one to report."""
    at = {(p.path, p.line, p.column) for _, p in doc.unset}
    decls.problems[start:] = [
        p for p in decls.problems[start:] if (p.path, p.line, p.column) not in at
    ]


def _passed_names(kind: str, decl: Any) -> list[str]:
    """The variables the hooks of a declaration pass through from fim's environment by name
    (`env: [GH_TOKEN]`): an agent's own hooks, or a reusable hook of hooks/*.yaml. Their
    values are secrets like `${VAR}` values (`fim.config.interpolate.passed_through`)."""
    specs = decl.hooks if kind == "agent" else [decl] if kind == "hook" else []
    return [name for spec in specs if isinstance(spec.env, list) for name in spec.env]


def _register(decls: Declarations, entry: Entry) -> None:
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
