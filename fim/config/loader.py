"""Files -> Declarations: find the project, read every folder, validate every file.

The loader never stops at the first problem: each file is read, parsed, interpolated and
validated on its own, and every problem (with `path:line:col`) is collected so one
`fim validate` run shows the user everything that is wrong. Cross-references between
files are the compiler's job (`fim.build.compile`); this module only knows single files.
What one file goes through (parse, validate, register) and `Declarations` itself are in
`fim.config.declarations`; this module walks the folders and keeps the previous load's
parsed files.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fim.config.case_files import read_case_files, reads_case_files
from fim.config.declarations import (
    FOLDER_OF,
    KIND_MODELS,
    NAME_RE,
    PROJECT_FILE,
    YAML_SUFFIXES,
    Declarations,
    Entry,
    parse_doc,
    register_entry,
    validate_doc,
)
from fim.config.files import keep_reads, keep_texts, list_files, read_text
from fim.config.interpolate import passed_through
from fim.config.schema import Project
from fim.config.serving import (
    MODELS,
    SERVE,
    model_at,
    model_error,
    model_warning,
    setting_group,
    settings_needed,
)
from fim.config.skill_files import load_skills
from fim.config.yamlio import Document
from fim.errors import Problem, ProjectNotFound
from fim.masking import Masker


def find_root(start: str | Path | None = None) -> Path:
    """The project root: `start` itself when given, else the nearest parent with fim.yaml."""
    if start is not None:
        root = Path(start).expanduser().resolve()
        if not (root / PROJECT_FILE).is_file():
            raise ProjectNotFound(
                f"no {PROJECT_FILE} in {root}",
                "pass the directory that holds fim.yaml, or run `fim init DIR`",
            )
        return root
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate
    raise ProjectNotFound(
        f"no {PROJECT_FILE} in {here} or its parents",
        "cd into a fim project, pass --project DIR, or run `fim init DIR`",
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
    _load_skill_folders(decls)
    decls.project._serve_only_unset += tuple(decls.left_out)
    decls.problems = mask_problems(decls.problems, decls.secrets)
    _CACHE.clear()
    _CACHE.update(decls.seen)
    keep_reads(decls.raw)
    keep_texts(decls.texts)
    return decls


def _load_skill_folders(decls: Declarations) -> None:
    """The skills of every folder `paths.skills` names (`[skills, .claude/skills]`: a
    Claude Code user's project skills next to fim's); a name in two folders is a duplicate
    skill, reported at the second."""
    for folder in decls.project.paths.skill_folders:
        load_skills(decls, folder)


def mask_problems(problems: list[Problem], secrets: set[str]) -> list[Problem]:
    """Problems with every secret masked (`fim.masking`): values from `${VAR}` may end up
    in messages, e.g. "expected an integer, got '...'". And each on one line: a control
    character a message quotes (a key named "\\n", a file name) is escaped."""
    if not secrets and not any(_CONTROL.search(str(p)) for p in problems):
        return problems
    show = Masker(secrets).text if secrets else str
    return [
        Problem(
            one_line(p.path),
            p.line,
            p.column,
            one_line(show(p.message)),
            one_line(show(p.hint)) if p.hint is not None else None,
        )
        for p in problems
    ]


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
"""What breaks a problem's line, or the terminal showing it (tabs are fine)."""


def one_line(text: str) -> str:
    """`text` with its control characters written as Python escapes (`\\n`, `\\x1b`):
    `fim validate` prints one `path:line:col: message` line per problem, and a key named
    "\\n" in a file made its "unknown key" problem two lines."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _stem(path: str | Path) -> str:
    name = os.path.basename(path)
    for suffix in (*YAML_SUFFIXES, ".py"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _load_project(decls: Declarations) -> None:
    path = decls.root / PROJECT_FILE
    text = read_text(decls, path)
    doc = parse_doc(decls, text, PROJECT_FILE, keep_unset=True) if text is not None else None
    decls.project_doc = doc
    if doc is None:
        decls.project_ok = False
        return
    left_out = _place_unset(decls, doc)
    if doc.data is None:
        doc.data = {}
    if isinstance(doc.data, dict):
        doc.data.setdefault("name", decls.root.name)
    project = validate_doc(decls, doc, "project", Project)
    if project is not None:
        project._serve_only_unset = tuple(left_out)
    if project is None:
        decls.project_ok = False
        paths = doc.data.get("paths") if isinstance(doc.data, dict) else None
        if isinstance(paths, dict):
            with contextlib.suppress(ValidationError):
                decls.project = Project.model_validate({"paths": paths})
        return
    decls.project = project


_UNAVAILABLE = {"mcp_servers": "mcp", "a2a_agents": "a2a"}
"""fim.yaml's sections whose entry an unset variable makes unavailable, and its kind."""


def _place_unset(decls: Declarations, doc: Document) -> list[tuple[str, Problem]]:
    """Place fim.yaml's unset variables: one under `mcp_servers.<name>` (or
    `a2a_agents.<name>`) makes that server (remote agent) unavailable (recorded in
    `decls.unavailable`; the snapshot leaves it out, so nothing starts it with "" for a
    secret). One in `state:`/`server:` or a model's settings is a
    problem only where that group is needed (`fim.config.serving`); elsewhere it is returned
    as a warning and the setting left out, so its default applies (`_leave_out`). Any other
    is a problem of the project."""
    left_out: list[tuple[str, Problem]] = []
    for path, problem in doc.unset:
        if len(path) > 2 and path[0] in _UNAVAILABLE and isinstance(path[1], str):
            decls.unavailable[_UNAVAILABLE[path[0]]].setdefault(path[1], []).append(problem)
        else:
            _place_one(decls, doc, "project", path, problem, left_out)
    doc.unset = []
    return left_out


def _place_one(
    decls: Declarations,
    doc: Document,
    kind: str,
    path: tuple[str | int, ...],
    problem: Problem,
    left_out: list[tuple[str, Problem]],
) -> None:
    """One unset variable of a file of `kind`: a problem, or where its group is not needed
    here a warning in `left_out` and the setting taken out of `doc.data`."""
    group = setting_group(kind, path)
    needed = group is None or group in settings_needed()
    if group == MODELS:
        at = (model_at(kind, path) or 0) + 1
        if needed:
            decls.problems.append(model_error(_setting(path[:at]), problem))
        else:
            left_out.append((_setting(path[:at]), model_warning(_setting(path[:at]), problem)))
            _pop(doc.data, path[: at + 1])
    elif group == SERVE and not needed:
        setting = ".".join(str(step) for step in path[:2] if isinstance(step, str))
        left_out.append((setting, _serve_only_warning(setting, problem)))
        _leave_out(doc.data, path)
    else:
        decls.problems.append(problem)


def _pop(data: Any, path: tuple[str | int, ...]) -> None:
    """Take the key at the end of `path` out of `data`: a model's setting (`api_key`, the
    whole `extra` whose header named the variable) is then as if unwritten."""
    for step in path[:-1]:
        if isinstance(data, dict):
            data = data.get(step)
        elif isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
            data = data[step]
        else:
            return
    if isinstance(data, dict):
        data.pop(path[-1], None)


def _setting(path: tuple[str | int, ...]) -> str:
    """`path` as the messages name a setting: `models.general`, `nodes.ask.model`,
    `cases[0].expect[1].judge.model`."""
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)
    return text.lstrip(".")


def _serve_only_warning(setting: str, problem: Problem) -> Problem:
    """The warning `fim validate` (and, for `state:`, every command on the store) shows for
    a `state:`/`server:` variable unset here: what this command does instead, and that the
    commands that read it will not start without it."""
    if setting == "state":
        default = Project.model_fields["state"].default
        tail = f"here `state` falls back to {default}"
        hint = "`fim serve` and `fim worker` refuse to start without it: export it where they run"
    else:
        tail = f"only `fim serve` and `fim worker` read {setting}"
        hint = "they refuse to start without it: export it where they run"
    message = f"{problem.message}; {tail}"
    return Problem(problem.path, problem.line, problem.column, message, hint)


def _leave_out(data: Any, path: tuple[str | int, ...]) -> None:
    """Take the value an unset variable emptied out of fim.yaml's data, so the setting is
    what it would be unwritten: `state` the default store, `server.port` 8000. In a list
    (`api_keys: ["${FIM_API_KEY}"]`, a tenant's `{key: ..., tenant: ...}`) the entry becomes
    "", which the server ignores as no key; positions stay the file's."""
    at = next((i for i, step in enumerate(path) if isinstance(step, int)), len(path) - 1)
    parent = data
    for step in path[:at]:
        parent = parent.get(step) if isinstance(parent, dict) else None
    last = path[at]
    if isinstance(parent, dict) and isinstance(last, str):
        parent.pop(last, None)
    elif isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent):
        parent[last] = ""


_Parsed = tuple[Any, Any, list[Problem], set[str], Any, list[tuple[str, Problem]]]
_CACHE: dict[tuple[Any, ...], _Parsed] = {}
"""Parsed and validated declaration files of the previous load, by (environment, settings
needed here, kind, path, text). A reload of a 1,000-agent project re-reads every file but
parses and validates only the ones that changed; entries not seen in a load are dropped.
The settings needed are part of the key: a file `fim validate` parsed with a model's unset
setting left out is never the one a run or a server then uses (`fim.config.serving`)."""


def _load_file(decls: Declarations, kind: str, path: str | Path) -> None:
    rel, stem = decls.rel(path), _stem(path)
    text = read_text(decls, path, rel)
    if text is None:
        decls.broken[kind].add(stem)
        return
    key = (decls.env_key, settings_needed(), kind, rel, text)
    parsed = _CACHE.get(key)
    if parsed is not None and (reads_case_files(parsed[0]) or "${file:" in text):
        parsed = None  # its CSV/JSONL or secret files may have changed under the same YAML
    if parsed is None:
        problems_before, secrets = len(decls.problems), set[str]()
        left_out: list[tuple[str, Problem]] = []
        doc = parse_doc(decls, text, rel, secrets=secrets, keep_unset=True)
        if doc is not None and kind != "connector":  # a connector's make it unavailable
            for at, problem in doc.unset:
                _place_one(decls, doc, kind, at, problem, left_out)
            doc.unset = []
        if doc is not None and isinstance(doc.data, dict):
            doc.data.setdefault("name", stem)
        if kind == "eval" and doc is not None:  # `cases: cases.csv`
            doc = read_case_files(decls, doc)
        decl = validate_doc(decls, doc, kind, KIND_MODELS[kind]) if doc is not None else None
        if decl is not None:
            passed_through(_passed_names(kind, decl), secrets)
        if doc is not None and doc.unset:
            _drop_unset_echoes(decls, doc, problems_before)
        partial = _partial(doc, kind) if decl is None and doc is not None else None
        parsed = (doc, decl, decls.problems[problems_before:], secrets, partial, left_out)
    else:
        doc, decl, problems, secrets, partial, left_out = parsed
        decls.problems.extend(problems)
    decls.secrets |= parsed[3]
    decls.left_out += left_out
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
    register_entry(decls, Entry(kind, decl.name, decl, doc))


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


__all__ = [
    "FOLDER_OF",
    "KIND_MODELS",
    "NAME_RE",
    "PROJECT_FILE",
    "YAML_SUFFIXES",
    "Declarations",
    "Entry",
    "find_root",
    "load",
    "mask_problems",
]
