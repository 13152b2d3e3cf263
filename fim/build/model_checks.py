"""The model references of a project: fim.yaml's model roles and their environment
overrides, and every `model:` an agent, workflow node or eval judge names (a role, a
provider string, or a `scripted:` file).

A provider string is checked for its provider (`fim.config.providers`), a `scripted:`
file for existing; a role must be declared. Kept apart from `fim.build.checks`, whose
`Checker` calls these for every file that names a model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fim.config.declarations import Entry
from fim.config.problems import suggest
from fim.config.providers import provider_problem
from fim.config.schema import ModelSettings
from fim.config.script_files import read_script
from fim.errors import Problem, RunError

if TYPE_CHECKING:
    from fim.build.checks import Checker
    from fim.config.yamlio import Path_

ROLE_ENV: dict[str, str] = {"general": "FIM_MODEL", "fast": "FIM_FAST_MODEL"}
"""Environment variables that override a declared role's model, so a user switches provider
(`FIM_MODEL=ollama/qwen2.5`) without editing files that are in git."""


def check_project(checker: Checker) -> None:
    """fim.yaml's model roles, and the `FIM_MODEL`/`FIM_FAST_MODEL` overrides set now."""
    doc = checker.decls.project_doc
    assert doc is not None
    env = os.environ
    for role, ref in checker.decls.project.models.items():
        model = ref.model if isinstance(ref, ModelSettings) else ref
        path = ("models", role, "model") if isinstance(ref, ModelSettings) else ("models", role)
        if model.startswith("scripted:"):
            check_scripted(checker, doc, path, model)
        check_provider(checker, doc, path, model)
        var = ROLE_ENV.get(role)
        if var and env.get(var, "").strip():  # the override replaces what is checked above
            problem = provider_problem(env[var].strip())
            if problem is not None:
                checker.add(doc.problem(path, f"{var}: {problem[0]}", problem[1]))


def check_provider(checker: Checker, doc: Any, path: Path_, model: str) -> None:
    """A provider string (`openai/gpt-4o-mini`) names a provider fim can reach."""
    problem = provider_problem(model)
    if problem is not None:
        checker.add(doc.problem(path, *problem))


def check_scripted(checker: Checker, doc: Any, path: Path_, model: str) -> None:
    """A `scripted:` model names a file of the project; a file of `replies:` is checked
    against its schema (`fim.config.script_files`), each problem once however many files
    name it."""
    file = model.removeprefix("scripted:")
    if not file or not (checker.decls.root / file).is_file():
        checker.add(
            doc.problem(
                path,
                f"scripted model file '{file}' not found",
                "give a path relative to the project root",
            )
        )
        return
    try:
        text = (checker.decls.root / file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # reported when a run reads it
    for problem in read_script(text, file.strip().replace("\\", "/"))[1]:
        if problem not in checker.decls.problems:
            checker.add(problem)


def check_model(checker: Checker, entry: Entry, path: Path_, ref: str | ModelSettings) -> None:
    """A model a file names: a declared role, a provider string or a `scripted:` file."""
    if isinstance(ref, ModelSettings):
        ref, path = ref.model, (*path, "model")
    if ref.startswith("scripted:"):
        check_scripted(checker, entry.doc, path, ref)
    elif "/" in ref:
        check_provider(checker, entry.doc, path, ref)
    elif "/" not in ref and ref not in checker.roles and checker.decls.project_ok:
        hint = suggest(ref, checker.roles, "model roles") or ""
        if not hint.startswith("did you mean"):
            hint += "; or use a litellm string such as openai/gpt-4o-mini"
        checker.add(entry.doc.problem(path, f"unknown model role '{ref}'", hint))


_COST_LIMITS = ("max_cost_usd", "max_cost_usd_per_day", "max_cost_usd_per_session")


def check_cost_limits(
    snapshot: Any, locate: Any, price_known: Callable[[str], bool | None]
) -> list[Problem]:
    """A cost limit (`max_cost_usd*`) that holds for an agent whose model has no known
    price refuses every run of that agent before its first call (costs fail closed:
    `fim.run.spend`), so it is a problem here, at the limit, not a surprise at run time.
    `price_known(model)` asks the price table (None: there is none to ask; nothing is
    reported then); a `scripted:` model's price is known, and zero
    (`fim.llm.catalog`). The project's and the key's limits hold for every agent: each is
    reported once per unpriced model, naming the agents it stops."""
    problems: list[Problem] = []
    budgets = [agent.budget for agent in snapshot.agents.values()]
    budgets += [snapshot.project.budget, snapshot.project.server.key_budget]
    if not any(getattr(b, key) is not None for b in budgets if b for key in _COST_LIMITS):
        return problems  # no cost limit: the price table is not read (most projects)
    unpriced: dict[str, list[str]] = {}  # model -> agents running on it
    known: dict[str, bool | None] = {}
    for name, agent in snapshot.agents.items():
        try:
            settings = snapshot.model_settings(agent.model)
        except RunError:  # an unknown role is reported by the declaration checks
            continue
        if settings.price is not None:
            continue
        model = settings.model
        if model not in known:
            known[model] = price_known(model)
        if known[model] is not False:
            continue
        unpriced.setdefault(model, []).append(name)
        if agent.budget is None:
            continue
        for key in _COST_LIMITS:
            if getattr(agent.budget, key) is not None:
                source = locate("agent", name, ("budget", key))
                problems.append(
                    Problem(
                        source.path,
                        source.line,
                        source.column,
                        f"budget.{key}: the price of model '{model}' is unknown, so every "
                        "run of this agent would be refused before its first call",
                        _price_hint(snapshot, agent.model),
                    )
                )
    project = snapshot.project
    for where, budget in (
        ("budget", project.budget),
        ("server.key_budget", project.server.key_budget),
    ):
        if budget is None:
            continue
        for key in _COST_LIMITS:
            if getattr(budget, key) is None:
                continue
            for model, agents in unpriced.items():
                source = locate("project", "", (*where.split("."), key))
                problems.append(
                    Problem(
                        source.path,
                        source.line,
                        source.column,
                        f"{where}.{key}: the price of model '{model}' is unknown, so every "
                        f"{'run' if where == 'budget' else 'run an API key starts'} of "
                        f"{', '.join(sorted(agents))} would be refused before its first call",
                        _price_hint(snapshot, snapshot.agents[agents[0]].model),
                    )
                )
    return problems


def _price_hint(snapshot: Any, ref: str | ModelSettings) -> str:
    fix = "add price: {input_per_mtok: ..., output_per_mtok: ...}"
    if isinstance(ref, str) and ref in snapshot.models:
        return f"{fix} to models.{ref} in fim.yaml"
    return f"{fix} to the model, declared as a role under models: in fim.yaml"
