"""The model references of a project: fim.yaml's model roles and their environment
overrides, and every `model:` an agent, workflow node or eval judge names (a role, a
provider string, or a `scripted:` file).

A provider string is checked for its provider (`fim.config.providers`), a `scripted:`
file for existing; a role must be declared. Kept apart from `fim.build.checks`, whose
`Checker` calls these for every file that names a model.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fim.config.declarations import Entry
from fim.config.problems import suggest
from fim.config.providers import provider_problem
from fim.config.schema import ModelSettings
from fim.config.script_files import read_script

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
