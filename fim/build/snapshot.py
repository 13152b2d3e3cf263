"""The Snapshot: everything a run needs from the user's files, compiled and frozen.

A run holds the snapshot it started with until it ends, so a reload (which builds a new
Snapshot and swaps a reference) never changes a run in flight. Nothing in here performs
I/O or holds a live connection; live things (HTTP clients, MCP sessions, the state store)
live in `fim.run.services.Services`, keyed by the declarations they came from.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import TypeVar

from fim.config.interpolate import while_developing
from fim.config.schema import (
    AgentDecl,
    DatabaseConnector,
    EvalSuite,
    HookDecl,
    HttpConnector,
    ModelSettings,
    Project,
    WorkflowDecl,
)
from fim.config.skill_files import Skill
from fim.errors import ConfigError, Problem, RunError, Unavailable
from fim.masking import Masker, remember


@dataclass(frozen=True)
class Source:
    """Where a declaration came from, so later errors can still point at the file."""

    path: str
    line: int = 1
    column: int = 1


CASE_SOURCE = "eval_case"
"""The kind of an eval case's entry in `Snapshot.sources`, named `suite/case` (a suite's
name is a file's stem: the first `/` ends it)."""

Locate = Callable[[str, str, tuple[str | int, ...]], Source]
"""`locate(kind, name, path)`: where the value at `path` inside a declaration is written
(`locate("agent", "support", ("hooks", 1))`), for checks that run on a whole snapshot."""


_K = TypeVar("_K")
_V = TypeVar("_V")


def _frozen(mapping: Mapping[_K, _V] | None = None) -> Mapping[_K, _V]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Snapshot:
    root: Path
    project: Project
    agents: Mapping[str, AgentDecl] = field(default_factory=_frozen)
    connectors: Mapping[str, HttpConnector | DatabaseConnector] = field(default_factory=_frozen)
    skills: Mapping[str, Skill] = field(default_factory=_frozen)
    workflows: Mapping[str, WorkflowDecl] = field(default_factory=_frozen)
    hooks: Mapping[str, HookDecl] = field(default_factory=_frozen)
    evals: Mapping[str, EvalSuite] = field(default_factory=_frozen)
    models: Mapping[str, ModelSettings] = field(default_factory=_frozen)
    """Model roles of fim.yaml, each resolved to full settings (FIM_MODEL applied)."""
    model_origins: Mapping[str, str] = field(default_factory=_frozen)
    """Role -> where its model came from: `fim.yaml`, or `FIM_MODEL (fim.yaml: ...)`."""
    sources: Mapping[tuple[str, str], Source] = field(default_factory=_frozen)
    """(kind, name) -> where it was declared."""
    secrets: frozenset[str] = frozenset()
    """Values that came from `${VAR}` interpolation, literal credentials and DSN passwords
    (`fim.masking.config_secrets`); masked wherever text leaves fim."""
    version: str = ""
    """Content hash of every file that went into the snapshot."""
    broken_skills: Mapping[str, tuple[Problem, ...]] = field(default_factory=_frozen)
    """Skill folders that failed to load, with their problems: an agent that uses one fails
    at run time, `fim validate` reports them, other agents run."""
    unavailable_connectors: Mapping[str, tuple[Problem, ...]] = field(default_factory=_frozen)
    """Connectors left out of `connectors` because they name an unset `${VAR}` (a secret not
    exported here), with one problem per variable: an agent or workflow that uses one fails
    at preflight, `fim validate` warns, everything else runs."""
    unavailable_mcp: Mapping[str, tuple[Problem, ...]] = field(default_factory=_frozen)
    """MCP servers left out of `project.mcp_servers` for the same reason."""
    unavailable_a2a: Mapping[str, tuple[Problem, ...]] = field(default_factory=_frozen)
    """Remote A2A agents left out of `project.a2a_agents` for the same reason."""
    declared_unavailable: Mapping[str, HttpConnector | DatabaseConnector] = field(
        default_factory=_frozen
    )
    """The declarations of `unavailable_connectors`, for the checks that resolve tool names
    (hook matchers, eval and skill tool names: `fim.hooks.targets`): their actions are
    declared, only a credential is missing here. Never run (newcomer-52 #1)."""
    prompt_files: Mapping[str, str] = field(default_factory=_frozen)
    """Prompt files the instructions include (`prompts/system.md` -> its text), as the
    compile read and checked them: runs render from these, never from the disk."""
    modules: Mapping[str, bytes] = field(default_factory=_frozen)
    """Python files of the hooks folder (`hooks/guard.py` -> its bytes), as the compile read
    them (`fim.build.project_modules.pin_modules`, part of `version`): `python:` hooks,
    `module:function` tools and `output_schema: module:Class` are executed from these
    (`fim.hooks.python_hooks`), never from the disk, so a run holds the code its snapshot
    checked and an edit reaches runs only through a reload that checked it."""
    command_files: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=_frozen)
    """Hook command -> the project files it names (`hooks/x.sh`), each with the sha256 of
    its bytes at compile (part of `version`): a command hook refuses to run one that has
    changed since (`fim.hooks.command`)."""
    hook_folders: Mapping[str, tuple[str, ...] | None] = field(default_factory=_frozen)
    """When the project has a command hook: every folder under the hooks folder and
    `.claude/` (`hooks`, `.claude/hooks`) -> its entries at compile (None: not there),
    part of `version` (`fim.build.hook_checks.pin_folders`). A command hook refuses to run
    when a file was added to or removed from one since (`fim.hooks.command_pins`)."""
    hook_folder_files: Mapping[str, str] = field(default_factory=_frozen)
    """Every file of `hook_folders` -> the sha256 of its bytes at compile (part of
    `version`): a command hook refuses to run when one changed since, however its command
    names the script (`cd hooks && ./x`, `"$CLAUDE_PROJECT_DIR"/.claude/hooks/x`)."""
    loaded_at: float = 0.0

    def __post_init__(self) -> None:
        remember(self.secrets)  # every exit of the process masks what any snapshot knows

    @cached_property
    def modules_digest(self) -> str:
        """One name for this snapshot's Python files and where they live: the key of the
        module objects executed from them (`fim.hooks.python_hooks`), computed once."""
        digest = hashlib.sha256(
            f"{self.root}\0{self.project.paths.hooks}\0".encode(errors="surrogateescape")
        )
        for rel in sorted(self.modules):
            digest.update(f"{rel}\0{len(self.modules[rel])}\0".encode(errors="surrogateescape"))
            digest.update(self.modules[rel])
        return digest.hexdigest()[:16]

    @cached_property
    def loaded(self) -> dict[str, ModuleType]:
        """The project modules executed from `modules` for this snapshot, by name
        (`fim.hooks.python_hooks.load_module` fills it), held as long as the snapshot is:
        the loader's cache of module sets is bounded, and a run on an older snapshot (a
        workflow resumed after a human node) re-executed its `output_schema` module on the
        event loop once that set was let go (attack-47 F8)."""
        return {}

    @cached_property
    def masker(self) -> Masker:
        """The masking policy over this snapshot's secrets (`fim.masking`)."""
        return Masker(self.secrets)

    @property
    def command_hooks(self) -> bool:
        """Whether a hook of the project runs a command: the only hooks given a transcript
        (`fim.private.transcripts`, which `fim serve` and `fim run` decide at start)."""
        specs = [spec for agent in self.agents.values() for spec in agent.hooks]
        return any(h.command for h in (*specs, *self.hooks.values()))

    def model_settings(self, ref: str | ModelSettings) -> ModelSettings:
        """Resolve a model reference: a role of fim.yaml, else a litellm model string.

        `FIM_MODEL` / `FIM_FAST_MODEL` already replaced the `general` / `fast` roles when
        the snapshot was built (`fim.build.compile.resolve_models`).
        """
        if isinstance(ref, ModelSettings):
            return ref
        if ref in self.models:
            return self.models[ref]
        if "/" in ref or ref.startswith("scripted:"):
            return ModelSettings(model=ref)
        # deferred: an error path; fim.config.providers costs every run's start ~10 ms
        from fim.build.model_checks import unknown_role

        message, hint = unknown_role(ref, self.models)
        raise RunError(message, hint=hint)

    def models_in_use(self) -> list[ModelSettings]:
        """The project's model roles and every model an agent names directly."""
        found = list(self.models.values())
        for agent in self.agents.values():
            ref = agent.model
            if isinstance(ref, ModelSettings) or ref not in self.models:
                try:
                    found.append(self.model_settings(ref))
                except RunError:  # `fim validate` reports it; a run of that agent fails
                    continue
        return found

    def agent(self, name: str) -> AgentDecl:
        try:
            return self.agents[name]
        except KeyError:
            raise RunError(
                f"unknown agent '{name}'",
                hint=f"agents: {', '.join(sorted(self.agents)) or 'none'}",
            ) from None

    def unavailable(self, kind: str, name: str) -> RunError | None:
        """Why the connector (`kind="connector"`), MCP server (`"mcp"`) or remote A2A agent
        (`"a2a"`) `name` cannot be used on this machine (an unset `${VAR}`), or None."""
        found = {"connector": self.unavailable_connectors, "a2a": self.unavailable_a2a}
        problems = found.get(kind, self.unavailable_mcp).get(name)
        if not problems:
            return None
        what = {"connector": "connector", "a2a": "remote A2A agent"}.get(kind, "MCP server")
        names = list(dict.fromkeys(_variable(p.message) for p in problems))
        first = problems[0]
        if "which cannot be read" in first.message:  # a secret file (`fim.config.interpolate`)
            return RunError(
                f"{what} '{name}' is unavailable: {first.message} "
                f"({first.path}:{first.line}:{first.column})",
                hint=first.hint,
            )
        # a URL's variable (`base_url`) is offered a local address: an empty one fails every
        # call (its problem's hint, `fim.config.interpolate`, already offers that address)
        url = while_developing(names[0], url=True) in (first.hint or "")
        return Unavailable(  # a served run answers 503 `connector_unavailable`
            f"{what} '{name}' is unavailable: {', '.join(names)} not set "
            f"({first.path}:{first.line}:{first.column})",
            hint=f"export {names[0]}=... before starting fim, or write "
            f"{while_developing(names[0], url)} while developing",
        )

    def named(self, kind: str, written: str) -> str:
        """The name of the declaration of `kind` whose file `written` is (`fim run
        agents/weather.yaml`, `fim eval evals/x.yaml`: a shell completes paths), relative
        to the project or the current folder; `written` itself otherwise (a name)."""
        if not written.endswith((".yaml", ".yml")) or "\0" in written:
            return written
        paths = {Path(written).as_posix()}
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # outside the project
            paths.add(Path(written).resolve().relative_to(self.root.resolve()).as_posix())
        for (k, name), source in self.sources.items():
            if k == kind and Path(source.path).as_posix() in paths:
                return name
        return written

    def source(self, kind: str, name: str, path: tuple[str | int, ...] = ()) -> Source:
        """Where a declaration starts (a snapshot keeps no YAML, so `path` is ignored: this
        is the fallback `Locate` for checks run outside a compile)."""
        return self.sources.get((kind, name), Source(path="fim.yaml"))

    def case_source(self, suite: str, case: str) -> Source | None:
        """Where an eval case is written: its YAML entry, CSV row or JSONL line."""
        return self.sources.get((CASE_SOURCE, f"{suite}/{case}"))

    def mask(self, text: str) -> str:
        """Replace every secret in `text`, in any encoding, with `***`."""
        return self.masker.text(text)


def available(project: Project, unavailable: Mapping[str, Mapping[str, object]]) -> Project:
    """`project` without the MCP servers and remote A2A agents an unset `${VAR}` makes
    unavailable (`Declarations.unavailable`): validated and checked whole, never started
    or called with "" for a secret."""
    update = {
        key: {k: v for k, v in getattr(project, key).items() if k not in unavailable[kind]}
        for key, kind in (("mcp_servers", "mcp"), ("a2a_agents", "a2a"))
        if unavailable.get(kind)
    }
    return project.model_copy(update=update) if update else project


def _variable(message: str) -> str:
    """`CRM_TOKEN` of "environment variable 'CRM_TOKEN' is not set" (the words of
    `fim.config.interpolate`, the only writer of an unset variable's problem)."""
    parts = message.split("'")
    return parts[1] if len(parts) > 2 else message


__all__ = ["CASE_SOURCE", "ConfigError", "Locate", "Skill", "Snapshot", "Source"]
