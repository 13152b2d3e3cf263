"""Cross-reference checks over loaded declarations: what one file names must exist in
another (tools, connectors, MCP servers, skills, workflows, model roles, hooks, agents),
every template parses, every schema is a schema. The Checker appends to
`decls.problems`; `fim.build.compile` runs it before building the snapshot. The checks
of a model reference (`model_checks`), a hook spec (`hook_checks`), a workflow
(`workflow_checks`) and an agent's instructions (`instructions`) have modules of their
own; agents and evals are checked here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from fim.build.builtin_names import builtin_hook_names, builtin_tool_names, tool_problems
from fim.build.connector_checks import check_connector
from fim.build.eval_checks import case_input_problems, suite_assertions, workflow_case_problems
from fim.build.hook_checks import check_hook, check_hook_refs
from fim.build.instructions import check_instructions, reads_files
from fim.build.model_checks import ROLE_ENV, check_model, check_project
from fim.build.project_modules import LoadModule, ModuleLoadError, project_module
from fim.build.remote_agent_checks import check_delegates, check_remote_endpoints
from fim.build.workflow_checks import check_workflow
from fim.config.declarations import Declarations, Entry
from fim.config.problems import suggest
from fim.config.schema import AgentDecl, EvalSuite, HookSpec, JudgeSpec, ModelSettings
from fim.config.schema.evals import regex_problem
from fim.config.schema.suite_rules import name_targets
from fim.config.templates import TemplateChecker
from fim.errors import Problem
from fim.schema_check import schema_problem as check_schema

if TYPE_CHECKING:
    from collections.abc import Callable

    from fim.build.snapshot import Locate, Snapshot
    from fim.config.yamlio import Path_

__all__ = ["ROLE_ENV", "Checker", "OutputClassError", "check_output_classes", "output_class"]
"""`ROLE_ENV` lives in `fim.build.model_checks`; imported from here too."""


_AgentMemo = tuple[tuple[Any, ...] | None, dict[str, tuple[Any, Any, list[Problem]]]]
_AGENT_MEMO: _AgentMemo = (None, {})
"""`Checker.check_agents` of the previous compile: its context and, by agent name, the
(decl, doc, problems) it found. One tuple, replaced whole, so a compile in another thread
never pairs one compile's context with another's problems."""


def _reads_disk(agent: AgentDecl) -> bool:
    """Whether the agent's checks look at files besides the declarations (so their result
    can change while every declaration stays the same)."""
    model = agent.model.model if isinstance(agent.model, ModelSettings) else agent.model
    return (
        model.startswith("scripted:")
        or any(spec.command for spec in agent.hooks)
        or reads_files(agent)  # `{% include 'prompts/x.md' %}`
    )


class Checker:
    """Cross-reference checks over loaded declarations; appends to `decls.problems`."""

    def __init__(self, decls: Declarations, listed: Callable[[str], bool] | None = None) -> None:
        self.decls = decls
        self.listed = listed  # litellm's table has this model? (`fim.llm.catalog`, above)
        self.templates = TemplateChecker()
        self.roles = set(decls.project.models)
        self.tools = builtin_tool_names()
        self.hook_names = builtin_hook_names()

    def names(self, kind: str) -> set[str]:
        return set(self.decls.entries[kind])

    def add(self, problem: Problem) -> None:
        self.decls.problems.append(problem)

    def ref(self, entry: Entry, path: Path_, kind: str, name: str, label: str = "") -> bool:
        """Report `name` if no `kind` of that name exists; True when it exists."""
        if name in self.decls.entries[kind]:
            return True
        if name not in self.decls.broken[kind]:
            what = label or kind
            self.add(
                entry.doc.problem(
                    path, f"unknown {what} '{name}'", suggest(name, self.names(kind), f"{kind}s")
                )
            )
        return False

    def run(self) -> None:
        if self.decls.project_ok:
            check_project(self)
            check_remote_endpoints(self)
        self.check_agents()
        for entry in self.decls.entries["hook"].values():
            check_hook(self, entry, entry.decl, ())
        check_hook_refs(self)
        for entry in self.decls.entries["workflow"].values():
            check_workflow(self, entry)
        for entry in self.decls.entries["eval"].values():
            self.check_eval(entry)
        for name, entry in self.decls.entries["connector"].items():
            if name not in self.decls.unavailable["connector"]:  # its unset ${VAR} is why
                check_connector(self, entry)
        self.check_partial()
        name_targets(self.decls.problems, self.names("agent"), self.names("workflow"))

    def check_partial(self) -> None:
        """The reference checks of files that failed validation, on the keys that did not
        fail (`Declarations.partial`): their unknown tools, skills, connectors, hooks and
        models show next to their schema problems, not in the next run."""
        partial = self.decls.partial
        for entry in partial["agent"].values():
            self.check_agent(entry)
            self.check_hook_items(entry)
        for entry in partial["hook"].values():
            check_hook(self, entry, entry.decl, ())
        for entry in partial["workflow"].values():
            check_workflow(self, entry)
        for entry in partial["eval"].values():
            self.check_eval(entry)

    def check_hook_items(self, entry: Entry) -> None:
        """An agent's `hooks:` list dropped from its partial declaration because one item
        failed: the items that validate alone are checked all the same, at their own
        index, so a key typo in one hook does not hide an unknown builtin in another."""
        items = entry.doc.data.get("hooks") if isinstance(entry.doc.data, dict) else None
        if not isinstance(items, list) or len(entry.decl.hooks) == len(items):
            return
        for i, item in enumerate(items):
            try:
                spec = HookSpec.model_validate(item)
            except (ValidationError, TypeError, ValueError):
                continue  # its own problem is reported already
            check_hook(self, entry, spec, ("hooks", i))

    # ------------------------------------------------------------------ models

    def check_model(self, entry: Entry, path: Path_, ref: str | ModelSettings) -> None:
        """A model a file names: a role, a provider string or a `scripted:` file."""
        check_model(self, entry, path, ref)

    # ------------------------------------------------------------------ agents

    def context(self) -> tuple[Any, ...]:
        """Everything `check_agent` reads besides the agent's own file: the names each
        kind declares (and the names of files that failed), model roles, MCP servers,
        hooks/*.py modules and the builtins. Contents of other files are never read."""
        decls = self.decls
        kinds = ("connector", "skill", "workflow", "agent", "hook")
        return (
            decls.root,
            decls.project_ok,
            tuple(decls.project.env_allowlist),  # `{{ env.X }}` in instructions
            frozenset(self.roles),
            (frozenset(decls.project.mcp_servers), frozenset(decls.project.a2a_agents)),
            decls.folder("hook"),
            frozenset(decls.python_hooks),
            self.tools,
            self.hook_names,
            *(frozenset(decls.entries[kind]) for kind in kinds),
            *(frozenset(decls.broken[kind]) for kind in kinds),
        )

    def check_agents(self) -> None:
        """`check_agent` on every agent, reusing the previous compile's problems of an agent
        whose file is unchanged (the loader hands back the same `decl` and `doc` objects)
        when nothing it reads changed either. A reload of a 1,000-agent project re-checks
        the one agent edited, not all of them. Agents whose checks look at the disk
        (a `scripted:` model file, a hook command script) are always checked again."""
        global _AGENT_MEMO
        context = self.context()
        last_context, last_problems = _AGENT_MEMO
        previous = last_problems if context == last_context else {}
        memo: dict[str, tuple[Any, Any, list[Problem]]] = {}
        problems = self.decls.problems
        for name, entry in self.decls.entries["agent"].items():
            cached = previous.get(name)
            if cached is not None and cached[0] is entry.decl and cached[1] is entry.doc:
                problems.extend(cached[2])
                memo[name] = cached
                continue
            before = len(problems)
            self.check_agent(entry)
            if not _reads_disk(entry.decl):
                memo[name] = (entry.decl, entry.doc, problems[before:])
        _AGENT_MEMO = (context, memo)

    def check_agent(self, entry: Entry) -> None:
        agent: AgentDecl = entry.decl
        doc = entry.doc
        self.check_model(entry, ("model",), agent.model)
        modules, folder, root = self.decls.python_hooks, self.decls.folder("hook"), self.decls.root
        for i, message, hint in tool_problems(agent.tools, self.tools, modules, folder, root):
            self.add(doc.problem(("tools", i), message, hint))
        for i, name in enumerate(agent.connectors):
            self.ref(entry, ("connectors", i), "connector", name)
        if self.decls.project_ok:
            servers = set(self.decls.project.mcp_servers)
            for i, name in enumerate(agent.mcp):
                if name not in servers:
                    self.add(
                        doc.problem(
                            ("mcp", i),
                            f"unknown MCP server '{name}'",
                            suggest(name, servers, "MCP servers (fim.yaml)"),
                        )
                    )
        if isinstance(agent.skills, list):
            for i, name in enumerate(agent.skills):
                self.ref(entry, ("skills", i), "skill", name)
        for i, name in enumerate(agent.workflows):
            self.ref(entry, ("workflows", i), "workflow", name)
        check_delegates(self, entry, agent.delegates)
        for i, spec in enumerate(agent.hooks):
            check_hook(self, entry, spec, ("hooks", i))
        check_instructions(self, entry)
        self.check_output_schema(entry, ("output_schema",), agent.output_schema)
        if agent.output_schema is not None and agent.engine == "dag":
            self.add(
                doc.problem(
                    ("output_schema",),
                    "output_schema needs engine: react (the dag engine does not validate "
                    "its answer)",
                    "remove engine: dag or output_schema",
                )
            )

    def check_output_schema(self, entry: Entry, path: Path_, spec: Any) -> None:
        """An inline schema must be a valid JSON Schema; `module:Class` must name a module
        of the hooks/ folder (the compile imports the class later: `check_output_classes`)."""

        if spec is None:
            return
        if isinstance(spec, dict):
            problem = check_schema(spec)
            if problem is not None:
                self.add(
                    entry.doc.problem(
                        path, problem, "see https://json-schema.org/understanding-json-schema"
                    )
                )
            return
        module, _, cls = spec.partition(":")
        module = module.strip().removesuffix(".py")
        if not module or not cls.strip():
            self.add(
                entry.doc.problem(
                    path,
                    f"invalid output_schema '{spec}'",
                    "give an inline JSON Schema, or module:Class naming a pydantic model "
                    "in the hooks/ folder",
                )
            )
        elif module not in self.decls.python_hooks:
            folder = self.decls.folder("hook")
            self.add(
                entry.doc.problem(
                    path,
                    f"output_schema module '{folder}/{module}.py' not found",
                    suggest(module, self.decls.python_hooks, "modules"),
                )
            )

    # ------------------------------------------------------------------ evals

    def check_eval(self, entry: Entry) -> None:
        suite: EvalSuite = entry.decl
        if suite.agent is not None:
            self.ref(entry, ("agent",), "agent", suite.agent)
        named = suite.workflow
        if named is not None and self.ref(entry, ("workflow",), "workflow", named):
            workflow = self.decls.entries["workflow"][named].decl
        else:
            workflow = None
        for i, case in enumerate(suite.cases):
            for where, message, hint in case_input_problems(case):  # at a CSV row's cell too
                self.add(entry.doc.problem(("cases", i, *where), message, hint))
            for where, key, message, hint in workflow_case_problems(case, workflow):
                self.add(entry.doc.problem(("cases", i, *where), message, hint, key=key))
        for at, assertion in suite_assertions(suite):  # `default_expect`'s once, not per case
            if isinstance(assertion.judge, JudgeSpec):
                self.check_model(entry, (*at, "judge", "model"), assertion.judge.model)
            if assertion.json_path is not None:
                path = (*at, "json_path", "path")
                self.check_json_path(entry, path, assertion.json_path.path)
            bad = regex_problem(assertion.regex) if assertion.regex is not None else None
            if bad is not None:
                hint = "a Python regex: write \\( \\[ \\. \\* \\+ \\? for the character itself"
                self.add(entry.doc.problem((*at, "regex"), bad, hint))

    def check_json_path(self, entry: Entry, path: Path_, text: str) -> None:
        """A JSONPath must parse (`fim.json_paths`: RFC 9535; python-jsonpath loads only
        for projects that write one)."""
        # deferred: loading fim.json_paths costs tens of ms
        from fim.json_paths import check

        problem = check(text)
        if problem is not None:
            self.add(
                entry.doc.problem(
                    path,
                    problem,
                    "JSONPath (RFC 9535): $.a.b[0], $.items[*].id; quote keys with spaces "
                    "or a leading $ as $['odd key']",
                )
            )


# ---------------------------------------------------------------------- output classes


class OutputClassError(Exception):
    """An `output_schema: module:Class` that names no usable pydantic model."""

    def __init__(self, message: str, hint: str | None) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def output_class(snapshot: Snapshot, ref: str, load_module: LoadModule) -> type[BaseModel]:
    """The pydantic model `ref` (`module:Class`) names in the snapshot's hooks folder, with
    its JSON Schema built once (what a run's contract asks of it); OutputClassError when
    it cannot be one."""
    module_name, _, name = ref.partition(":")
    module_name, name = module_name.strip().removesuffix(".py"), name.strip()
    try:
        module = project_module(snapshot, module_name, load_module)
    except ModuleLoadError as exc:
        raise OutputClassError(f"output_schema '{ref}': {exc.detail}", exc.hint) from None
    try:  # the module's own code runs here too: a PEP 562 `__getattr__`, a metaclass
        cls = getattr(module, name, None)
        model = isinstance(cls, type) and issubclass(cls, BaseModel)
        models = [] if cls is not None else _models_in(module)
    except Exception as exc:  # an ImportError too: the project's, not a broken install
        raise OutputClassError(
            f"output_schema '{ref}': reading '{name}' of the module raised "
            f"{type(exc).__name__}: {exc}",
            "a module `__getattr__` that imports an optional package needs it installed; "
            "or name a class the module defines",
        ) from None
    if cls is None:
        hint = f"pydantic models in it: {', '.join(models) or 'none'}"
        raise OutputClassError(f"output_schema '{ref}': no class '{name}' in the module", hint)
    if not model:
        raise OutputClassError(
            f"output_schema '{ref}' is not a pydantic model class",
            "name a class deriving from pydantic.BaseModel in the project's hooks/ folder",
        )
    try:
        cls.model_json_schema()
    except Exception as exc:  # a field pydantic cannot describe: no run could use it
        raise OutputClassError(
            f"output_schema '{ref}' has no JSON Schema: {type(exc).__name__}: {exc}",
            "give every field a type pydantic can describe in JSON Schema",
        ) from None
    return cls


def _models_in(module: Any) -> list[str]:
    """The pydantic models a module defines, for a hint."""
    return sorted(
        n
        for n, v in vars(module).items()
        if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__
    )


def output_class_refs(snapshot: Snapshot) -> list[tuple[str, str, Path_, str]]:
    """(kind, name, path, `module:Class`) of each `output_schema` that names a class: an
    agent's, and a workflow node's (`llm`, `agent`)."""
    found: list[tuple[str, str, Path_, str]] = [
        ("agent", name, ("output_schema",), agent.output_schema)
        for name, agent in snapshot.agents.items()
        if isinstance(agent.output_schema, str)
    ]
    for workflow, decl in snapshot.workflows.items():
        for node_id, node in decl.nodes.items():
            spec = getattr(node, "output_schema", None)
            if isinstance(spec, str):
                found.append(("workflow", workflow, ("nodes", node_id, "output_schema"), spec))
    return found


def check_output_classes(
    snapshot: Snapshot, locate: Locate, load_module: LoadModule
) -> list[Problem]:
    """Import every `output_schema: module:Class` once and check it is a model, as problems
    at the entry. The compile does it, so a reload's child process checks the module first
    (`fim.build.vet`) and a run finds it imported: never first imported by a run, on the
    server's event loop (attack-46 F3: a module that slept at import stalled every request)."""
    problems: list[Problem] = []
    for kind, name, path, ref in output_class_refs(snapshot):
        try:
            output_class(snapshot, ref, load_module)
        except OutputClassError as exc:
            src = locate(kind, name, path)
            problems.append(Problem(src.path, src.line, src.column, exc.message, exc.hint))
    return problems
