"""Declarations -> Snapshot.

The loader validated each file on its own; `fim.build.checks` checks what one file names
in another, then the snapshot is built and the checks that need it run (workflows an agent
uses, every hook built once). All problems are collected and raised together as one
ConfigError, each pointing at the value at fault.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from fim.build.builtin_names import is_python_tool
from fim.build.checks import ROLE_ENV, Checker, check_output_classes, output_class_refs
from fim.build.hook_checks import pin_commands, pin_folders
from fim.build.model_checks import check_cost_limits, meant_model
from fim.build.project_modules import pin_modules
from fim.build.snapshot import CASE_SOURCE, Locate, Snapshot, Source, available
from fim.build.vet import first_imports_refused
from fim.build.workflow_checks import check_agent_workflows, python_tool_nodes
from fim.config.case_files import case_lines
from fim.config.loader import Declarations, find_root, load, mask_problems
from fim.config.schema import ModelSettings
from fim.errors import ConfigError, Problem

SnapshotCheck = Callable[[Snapshot, Locate], list[Problem]]
Vet = Callable[[Snapshot], list[Problem]]
"""`vet(snapshot)`: the problems of the candidate found where its Python cannot touch this
process (`fim.build.vet.vet_in_child`); nothing when it compiles."""
Gates = Callable[[Snapshot], list[Problem]]
"""`gates(snapshot)`: what a running server refuses of a candidate besides compiling
(`fim.build.reload.SnapshotHolder.refusals`); nothing when it may be swapped in."""


def _check_hooks(snapshot: Snapshot, locate: Locate) -> list[Problem]:
    """Build every hook once (`fim.hooks.build`): deferred on purpose, hooks import their
    builtins and the user's python only when the declarations are clean."""
    # deferred: loading fim.types costs tens of ms
    from fim.hooks.build import check_hooks

    return check_hooks(snapshot, locate)


def _check_eval_tools(snapshot: Snapshot, locate: Locate) -> list[Problem]:
    """The tools eval assertions name, against what their agent can call
    (`fim.build.eval_checks`), seen as hooks see them (`fim.hooks.targets`, a layer up)."""
    # deferred: loading fim.hooks costs tens of ms
    from fim.build.eval_checks import check_eval_tools
    from fim.hooks.targets import hook_targets

    return check_eval_tools(snapshot, locate, hook_targets)


def _check_python_refs(snapshot: Snapshot, locate: Locate) -> list[Problem]:
    """Import and build every `tools: [module:function]` and workflow `tool: module:function`
    once (`fim.tools.python_tools`), and every `output_schema: module:Class`
    (`check_output_classes`), with the module loader of python hooks (a layer up)."""
    if not any(
        is_python_tool(t) for agent in snapshot.agents.values() for t in agent.tools
    ) and not (python_tool_nodes(snapshot) or output_class_refs(snapshot)):
        return []  # most projects: nothing to import
    # deferred: the project's python is imported only when the declarations are clean
    from fim.hooks.python_hooks import load_module
    from fim.tools.python_tools import check_tools

    tools = check_tools(snapshot, locate, load_module)
    return tools + check_output_classes(snapshot, locate, load_module)


def _check_eval_python(snapshot: Snapshot, locate: Locate) -> list[Problem]:
    """Import every `python: module:function` eval assertion's function once
    (`fim.build.eval_python`), with the module loader of python hooks (a layer up)."""
    if not any(
        a.python is not None
        for suite in snapshot.evals.values()
        for c in suite.cases
        for a in c.expect
    ):
        return []  # most projects: nothing to import
    # deferred: the project's python is imported only when the declarations are clean
    from fim.build.eval_python import check_python_assertions
    from fim.hooks.python_hooks import load_module

    return check_python_assertions(snapshot, locate, load_module)


def _catalog() -> ModuleType:
    """litellm's price table (`fim.llm.catalog`), for the checks that ask it: cost limits,
    and a model written without its provider (`fim.build.model_checks.unknown_role`)."""
    # deferred: a layer up, and read only when a check asks it
    from fim.llm import catalog

    return catalog


def _check_cost_limits(snapshot: Snapshot, locate: Locate) -> list[Problem]:
    """Cost limits on models with no known price (`fim.build.model_checks`), asking
    litellm's price table (`fim.llm.catalog`, a layer up) only when one is declared; a
    misspelt model's hint offers the listed name (`meant_model`) before a price."""

    def price_known(model: str) -> bool | None:
        catalog = _catalog()  # the price table is read only for a cost limit (~20 ms)
        if catalog.price_is_known(model):  # a `scripted:` model too: $0, as its runs are
            return True
        if not catalog.table():
            return None  # no table to ask: a price may well be known at run time
        return False

    def meant(settings: ModelSettings) -> str | None:  # only for an unpriced model, as above
        return meant_model(settings, _catalog().table())

    return check_cost_limits(snapshot, locate, price_known, meant)


def _check_project_views(snapshot: Snapshot, locate: Locate) -> list[Problem]:
    """Agents with `sandbox: {project: read}` whose sandboxed programs would see the SQLite
    state store (`fim.tools.sandbox.project.store_shown`, a layer up): their calls would
    refuse, so the project is refused here first (attack-34 #4)."""
    readers = [name for name, a in snapshot.agents.items() if a.sandbox.project == "read"]
    if not readers:
        return []  # most projects: the sandbox never sees the project
    # deferred: loading fim.tools costs tens of ms, only for a project-reading agent
    from fim.tools.sandbox.project import store_shown

    project = snapshot.project
    shown = store_shown(snapshot.root, sandbox=project.sandbox, state_url=project.state)
    if shown is None:
        return []
    problems = []
    for name in readers:
        where = locate("agent", name, ("sandbox", "project"))
        problems.append(Problem(where.path, where.line, where.column, *shown))
    return problems


SNAPSHOT_CHECKS: tuple[SnapshotCheck, ...] = (
    check_agent_workflows,
    _check_hooks,
    _check_eval_tools,
    _check_python_refs,
    _check_eval_python,
    _check_cost_limits,
    _check_project_views,
)
"""Checks that need the whole compiled project (e.g. building every hook once); `locate`
points into the files. They run only when the checks here found nothing, so a problem is
never reported twice. Each is imported explicitly: one that cannot be imported fails the
compile with its ImportError, it is never skipped."""


def _locator(decls: Declarations) -> Locate:
    def locate(kind: str, name: str, path: tuple[str | int, ...] = ()) -> Source:
        entry = decls.entries.get(kind, {}).get(name)
        if kind == "project" and decls.project_doc is not None:  # a value of fim.yaml
            where = decls.project_doc.problem(path, "")
            return Source(where.path, where.line, where.column)
        if entry is None:
            return Source("fim.yaml")
        where = entry.doc.problem(path, "")  # a case read from a CSV row: that row's file
        return Source(where.path, where.line, where.column)

    return locate


EVEN_WHEN_BROKEN: tuple[SnapshotCheck, ...] = (_check_python_refs, _check_project_views)
"""Snapshot checks that also run on a project with problems, for the entries not reported
already: importing the project's Python tools found their problems only once everything
else was fixed, so `fim validate` reported a project in stages. The store check reads
no project file and costs nothing."""


NO_PROJECT_PYTHON: tuple[SnapshotCheck, ...] = (_check_project_views,)
"""`EVEN_WHEN_BROKEN` for a reload: a candidate with problems is rejected anyway, and its
Python is not imported into the server to report more."""


def _vetted_problems(snapshot: Snapshot, locate: Locate, vet: Vet) -> list[Problem]:
    """The snapshot checks, importing no project module this process does not hold yet
    until `vet` passed the project: a reload that changes no Python file (or no module a
    check imports) costs nothing more; one that does is compiled once in a child first."""
    with first_imports_refused() as refused:
        problems = _snapshot_problems(snapshot, locate)
    if not refused:
        return problems
    found = vet(snapshot)
    return found or _snapshot_problems(snapshot, locate)


def _snapshot_problems(
    snapshot: Snapshot, locate: Locate, checks: tuple[SnapshotCheck, ...] = SNAPSHOT_CHECKS
) -> list[Problem]:
    problems: list[Problem] = []
    for check in checks:
        try:
            problems.extend(check(snapshot, locate))
        except ImportError:
            raise  # a broken install is not a problem of the user's project: never hide it
        except SystemExit as exc:  # the project's Python called sys.exit() on import
            problems.append(
                Problem(
                    "fim.yaml",
                    1,
                    1,
                    f"a Python module of the project raised SystemExit({exc.code!r}) when imported",
                    "hook, tool and eval modules must not call sys.exit() or exit() at import",
                )
            )
        except Exception as exc:  # a bug in a check must not hide the user's other problems
            name = getattr(check, "__qualname__", repr(check))
            problems.append(
                Problem("fim.yaml", 1, 1, f"check {name} failed: {type(exc).__name__}: {exc}")
            )
    return problems


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Compiling allocates many objects and frees none in cycles; the cyclic collector's
    passes over that growing heap were a fifth of compile time and grew with the project."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_project(root: str | Path | None = None) -> Declarations:
    """Load and validate every file of the project (walking up to fim.yaml if no root)."""
    return load(find_root(root))


def compile_project(
    root: str | Path | None = None, *, vet: Vet | None = None, gates: Gates | None = None
) -> Snapshot:
    """Load, cross-check and freeze the project; raises ConfigError with every problem.

    With `vet` (a running server's reload of an edit or a fetched commit), the project's
    Python is never imported into this process for a candidate that is rejected: not at
    all when its files have problems already, and a module this process has not imported
    yet only after `vet` found no problem with the whole project (`_vetted_problems`).
    `gates` judge the candidate's settings before any of its Python is imported: one they
    refuse is a candidate with problems."""
    with _gc_paused():
        decls = load_project(root)
        Checker(decls, lambda model: _catalog().listed(model)).run()
        modules = pin_modules(decls)  # before the snapshot: part of its version
        commands = pin_commands(decls)
        folders = pin_folders(decls)
        snapshot = build_snapshot(decls, modules, commands, folders)
    decls.problems += gates(snapshot) if gates else []
    if not decls.problems:
        locate = _locator(decls)
        found = _vetted_problems(snapshot, locate, vet) if vet else None
        decls.problems.extend(found if found is not None else _snapshot_problems(snapshot, locate))
    else:
        flagged = {(p.path, p.line, p.column) for p in decls.problems}
        checks = EVEN_WHEN_BROKEN if vet is None else NO_PROJECT_PYTHON
        more = _snapshot_problems(snapshot, _locator(decls), checks)
        decls.problems += [p for p in more if (p.path, p.line, p.column) not in flagged]
    if decls.problems:  # the project is broken anyway: report the skills' problems too
        decls.problems += [p for found in decls.skill_problems.values() for p in found]
        problems = mask_problems(decls.problems, decls.secrets)
        raise ConfigError(sorted(problems, key=lambda p: (p.path, p.line, p.column)), snapshot)
    return snapshot


def build_snapshot(
    decls: Declarations,
    modules: Mapping[str, bytes] | None = None,
    commands: Mapping[str, tuple[tuple[str, str], ...]] | None = None,
    folders: tuple[Mapping[str, tuple[str, ...] | None], Mapping[str, str]] | None = None,
) -> Snapshot:
    """The snapshot of `decls`, with the hooks folder's Python files and the hook scripts'
    and hook folders' digests the compile pinned (`pin_modules`, `pin_commands`,
    `pin_folders`: read into `decls.digest` first, so the version covers them)."""
    entries = decls.entries
    sources: dict[tuple[str, str], Source] = {("project", decls.project.name): Source("fim.yaml")}
    for kind, by_name in entries.items():
        for name, entry in by_name.items():
            line, col = entry.doc.position(())
            sources[(kind, name)] = Source(entry.doc.path, line, col)
            if kind == "eval":  # each case's row or entry, for the reports (JUnit file/line)
                names = [case.name for case in entry.decl.cases]
                for case, (path, at) in case_lines(entry.doc, names).items():
                    sources[(CASE_SOURCE, f"{name}/{case}")] = Source(path, at)

    def decls_of(kind: str) -> MappingProxyType[str, Any]:
        return MappingProxyType({name: e.decl for name, e in entries[kind].items()})

    agents = {}
    for name, entry in entries["agent"].items():
        agent = entry.decl
        if isinstance(agent.model, ModelSettings):
            agent = agent.model_copy(update={"model": _blank_unset(agent.model)})
        agents[name] = agent

    models, origins = resolve_models(decls.project.models, os.environ)
    unavailable = decls.unavailable
    project = available(decls.project, unavailable)
    declared = decls_of("connector")  # an unavailable one's actions are declared (#52.1)
    connectors = {k: v for k, v in declared.items() if k not in unavailable["connector"]}

    def frozen(found: dict[str, list[Problem]]) -> MappingProxyType[str, tuple[Problem, ...]]:
        return MappingProxyType(
            {name: tuple(mask_problems(ps, decls.secrets)) for name, ps in found.items()}
        )

    return Snapshot(
        root=decls.root,
        project=project,
        agents=MappingProxyType(agents),
        connectors=MappingProxyType(connectors),
        skills=decls_of("skill"),
        workflows=decls_of("workflow"),
        hooks=decls_of("hook"),
        evals=decls_of("eval"),
        models=MappingProxyType(models),
        model_origins=MappingProxyType(origins),
        sources=MappingProxyType(sources),
        broken_skills=MappingProxyType(
            {
                name: tuple(mask_problems(found, decls.secrets))
                for name, found in decls.skill_problems.items()
            }
        ),
        unavailable_connectors=frozen(unavailable["connector"]),
        unavailable_mcp=frozen(unavailable["mcp"]),
        unavailable_a2a=frozen(unavailable["a2a"]),
        declared_unavailable={k: v for k, v in declared.items() if k not in connectors},
        secrets=frozenset(decls.secrets),
        version=decls.digest.hexdigest()[:12],
        prompt_files=MappingProxyType(dict(decls.prompt_files)),
        modules=MappingProxyType(dict(modules or {})),
        command_files=MappingProxyType(dict(commands or {})),
        hook_folders=MappingProxyType(dict(folders[0] if folders else {})),
        hook_folder_files=MappingProxyType(dict(folders[1] if folders else {})),
        loaded_at=time.time(),
    )


def resolve_models(
    roles: dict[str, str | ModelSettings], env: Mapping[str, str] | None = None
) -> tuple[dict[str, ModelSettings], dict[str, str]]:
    """Roles -> (full settings, where each came from). A role may name another role; empty
    `api_base`/`api_key` (from `${VAR:-}`) mean unset.

    A non-empty `FIM_MODEL` in `env` replaces the model of the declared `general` role and,
    unless `FIM_FAST_MODEL` is set too, of the `fast` role: one variable moves a project to
    another provider (a local Ollama needs no key for either role). `FIM_FAST_MODEL` alone
    replaces only `fast`. Overrides apply before aliases resolve.
    The override keeps the role's sampling settings (temperature, max_tokens, timeout,
    retries) and drops its endpoint, key and provider `extra`, which belong to the model
    it replaces. The origin is `fim.yaml` or e.g. `FIM_MODEL (fim.yaml: openai/gpt-4o-mini)`.
    """
    roles = dict(roles)
    origins = {role: "fim.yaml" for role in roles}
    env = env or {}
    for role, var in ROLE_ENV.items():
        value = env.get(var, "").strip()
        alias = isinstance(roles.get(role), str) and roles[role] in roles
        if not value and role == "fast" and not alias:
            var, value = "FIM_MODEL", env.get("FIM_MODEL", "").strip()
        if role not in roles or not value:
            continue
        ref = roles[role]
        declared = ref.model if isinstance(ref, ModelSettings) else ref
        keep: dict[str, Any] = {}
        if isinstance(ref, ModelSettings):
            keep = ref.model_dump(include={"temperature", "max_tokens", "timeout", "max_retries"})
        roles[role] = ModelSettings(model=value, **keep)
        origins[role] = f"{var} (fim.yaml: {declared})"
    resolved: dict[str, ModelSettings] = {}

    def resolve(role: str, seen: tuple[str, ...]) -> ModelSettings:
        ref = roles[role]
        if isinstance(ref, str) and ref in roles and ref not in seen and "/" not in ref:
            origins[seen[0]] = origins[ref]
            return resolve(ref, (*seen, ref))
        return _blank_unset(ref if isinstance(ref, ModelSettings) else ModelSettings(model=ref))

    for role in roles:
        resolved[role] = resolve(role, (role,))
    return resolved, origins


def _blank_unset(settings: ModelSettings) -> ModelSettings:
    """`api_base: "${OPENAI_BASE_URL:-}"` with the variable unset means "no api_base"."""
    blank = {k: None for k in ("api_base", "api_key") if getattr(settings, k) == ""}
    return settings.model_copy(update=blank) if blank else settings
