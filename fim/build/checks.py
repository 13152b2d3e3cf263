"""Cross-reference checks over loaded declarations: what one file names must exist in
another (tools, connectors, MCP servers, skills, workflows, model roles, hooks, agents),
every template parses, every schema is a schema. The Checker appends to
`decls.problems`; `fim.build.compile` runs it before building the snapshot."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.build.builtin_names import builtin_hook_names, builtin_tool_names, tool_problems
from fim.build.instructions import check_instructions, reads_files
from fim.build.workflow_checks import check_workflow
from fim.config.declarations import Declarations, Entry
from fim.config.problems import suggest
from fim.config.providers import provider_problem
from fim.config.schema import AgentDecl, EvalSuite, HookSpec, JudgeSpec, ModelSettings
from fim.config.templates import TemplateChecker
from fim.errors import Problem
from fim.schema_check import schema_problem as check_schema

if TYPE_CHECKING:
    from fim.config.yamlio import Path_


def command_program(command: str, root: Path) -> str:
    """The program a hook command runs, with the protocol's project-dir variables expanded
    as the hook's shell will (`"$CLAUDE_PROJECT_DIR"/hooks/x.sh`)."""
    words = command.split()
    program = words[0] if words else ""
    for var in ("CLAUDE_PROJECT_DIR", "FIM_PROJECT_DIR"):
        for form in (f"${{{var}}}", f"${var}"):
            program = program.replace(form, str(root))
    return program.replace('"', "").replace("'", "")


ROLE_ENV: dict[str, str] = {"general": "FIM_MODEL", "fast": "FIM_FAST_MODEL"}
"""Environment variables that override a declared role's model, so a user switches provider
(`FIM_MODEL=ollama/qwen2.5`) without editing files that are in git."""


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

    def __init__(self, decls: Declarations) -> None:
        self.decls = decls
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
            self.check_project()
        self.check_agents()
        for entry in self.decls.entries["hook"].values():
            self.check_hook(entry, entry.decl, ())
        self.check_hook_refs()
        for entry in self.decls.entries["workflow"].values():
            check_workflow(self, entry)
        for entry in self.decls.entries["eval"].values():
            self.check_eval(entry)
        self.check_partial()

    def check_partial(self) -> None:
        """The reference checks of files that failed validation, on the keys that did not
        fail (`Declarations.partial`): their unknown tools, skills, connectors, hooks and
        models show next to their schema problems, not in the next run."""
        partial = self.decls.partial
        for entry in partial["agent"].values():
            self.check_agent(entry)
        for entry in partial["hook"].values():
            self.check_hook(entry, entry.decl, ())
        for entry in partial["workflow"].values():
            check_workflow(self, entry)
        for entry in partial["eval"].values():
            self.check_eval(entry)

    # ------------------------------------------------------------------ project

    def check_project(self) -> None:
        doc = self.decls.project_doc
        assert doc is not None
        env = os.environ
        for role, ref in self.decls.project.models.items():
            model = ref.model if isinstance(ref, ModelSettings) else ref
            path = ("models", role, "model") if isinstance(ref, ModelSettings) else ("models", role)
            if model.startswith("scripted:"):
                self.check_scripted(doc, path, model)
            self.check_provider(doc, path, model)
            var = ROLE_ENV.get(role)
            if var and env.get(var, "").strip():  # the override replaces what is checked above
                problem = provider_problem(env[var].strip())
                if problem is not None:
                    self.add(doc.problem(path, f"{var}: {problem[0]}", problem[1]))

    def check_provider(self, doc: Any, path: Path_, model: str) -> None:
        problem = provider_problem(model)
        if problem is not None:
            self.add(doc.problem(path, *problem))

    def check_scripted(self, doc: Any, path: Path_, model: str) -> None:
        file = model.removeprefix("scripted:")
        if not file or not (self.decls.root / file).is_file():
            self.add(
                doc.problem(
                    path,
                    f"scripted model file '{file}' not found",
                    "give a path relative to the project root",
                )
            )

    def check_model(self, entry: Entry, path: Path_, ref: str | ModelSettings) -> None:
        if isinstance(ref, ModelSettings):
            ref, path = ref.model, (*path, "model")
        if ref.startswith("scripted:"):
            self.check_scripted(entry.doc, path, ref)
        elif "/" in ref:
            self.check_provider(entry.doc, path, ref)
        elif "/" not in ref and ref not in self.roles and self.decls.project_ok:
            hint = suggest(ref, self.roles, "model roles") or ""
            if not hint.startswith("did you mean"):
                hint += "; or use a litellm string such as openai/gpt-4o-mini"
            self.add(entry.doc.problem(path, f"unknown model role '{ref}'", hint))

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
            frozenset(decls.project.mcp_servers),
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
        modules, folder = self.decls.python_hooks, self.decls.folder("hook")
        for i, message, hint in tool_problems(agent.tools, self.tools, modules, folder):
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
        for i, name in enumerate(agent.delegates):
            self.ref(entry, ("delegates", i), "agent", name)
        for i, spec in enumerate(agent.hooks):
            self.check_hook(entry, spec, ("hooks", i))
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
        of the hooks/ folder (the class is imported when a run first needs it)."""

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

    # ------------------------------------------------------------------ hooks

    def check_hook(self, entry: Entry, spec: HookSpec, path: Path_) -> None:
        doc = entry.doc
        if spec.use is not None:
            hooks = self.hook_names
            if spec.use not in hooks:
                self.add(
                    doc.problem(
                        (*path, "use"),
                        f"unknown builtin hook '{spec.use}'",
                        suggest(spec.use, hooks, "hooks"),
                    )
                )
        elif spec.ref is not None:
            self.ref(entry, (*path, "ref"), "hook", spec.ref, "hook ref")
        elif spec.python is not None:
            module, _, cls = spec.python.partition(":")
            if not module or not cls:
                self.add(
                    doc.problem(
                        (*path, "python"),
                        f"invalid python hook '{spec.python}'",
                        "write module:Class, e.g. redact:RedactEmails",
                    )
                )
            elif module not in self.decls.python_hooks:
                folder = self.decls.folder("hook")
                self.add(
                    doc.problem(
                        (*path, "python"),
                        f"python hook module '{folder}/{module}.py' not found",
                        suggest(module, self.decls.python_hooks, "modules"),
                    )
                )
        elif spec.command is not None:
            program = command_program(spec.command, self.decls.root)
            script = self.decls.root / program
            if "/" in program and not script.exists():
                self.add(
                    doc.problem(
                        (*path, "command"),
                        f"hook command '{program}' not found",
                        "paths are relative to the project root",
                    )
                )
            elif "/" in program and not os.access(script, os.X_OK):
                # the shell refuses it on every call (exit 126): the hook would block them all
                self.add(
                    doc.problem(
                        (*path, "command"),
                        f"hook script '{program}' is not executable",
                        f"chmod +x {program}; commit the mode with "
                        f"git update-index --chmod=+x {program}",
                    )
                )
        if spec.event is None and spec.command is not None:
            self.add(
                doc.problem(
                    path,
                    "a command hook needs 'event'",
                    "set event: PreToolUse, PostToolUse or SessionStart",
                )
            )

    def check_hook_refs(self) -> None:
        hooks = self.decls.entries["hook"]
        for name, entry in hooks.items():
            seen = [name]
            current = entry.decl.ref
            while current is not None and current in hooks:
                if current in seen:
                    self.add(
                        entry.doc.problem(
                            ("ref",),
                            "hook ref cycle: " + " -> ".join([*seen, current]),
                            "a hook ref must end at a use/command/python hook",
                        )
                    )
                    break
                seen.append(current)
                current = hooks[current].decl.ref

    # ------------------------------------------------------------------ evals

    def check_eval(self, entry: Entry) -> None:
        suite: EvalSuite = entry.decl
        if suite.agent is not None:
            self.ref(entry, ("agent",), "agent", suite.agent)
        if suite.workflow is not None:
            self.ref(entry, ("workflow",), "workflow", suite.workflow)
        for i, case in enumerate(suite.cases):
            for j, assertion in enumerate(case.expect):
                if isinstance(assertion.judge, JudgeSpec):
                    path = ("cases", i, "expect", j, "judge", "model")
                    self.check_model(entry, path, assertion.judge.model)
                if assertion.json_path is not None:
                    self.check_json_path(
                        entry,
                        ("cases", i, "expect", j, "json_path", "path"),
                        assertion.json_path.path,
                    )

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
