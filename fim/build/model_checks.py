"""The model references of a project: fim.yaml's model roles and their environment
overrides, and every `model:` an agent, workflow node or eval judge names (a role, a
provider string, or a `scripted:` file).

A provider string is checked for its provider (`fim.config.providers`), a `scripted:`
file for existing; a role must be declared. Kept apart from `fim.build.checks`, whose
`Checker` calls these for every file that names a model. A model name that litellm's price
table does not list, close to one it does (`anthropic/claude-sonet-4-5`), is a warning with
the listed name (`model_name_warnings`), and the hint of a cost limit on it offers that name
before a price (`check_cost_limits`); the table is handed in from a layer up.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.config.declarations import Entry
from fim.config.problems import suggest
from fim.config.providers import provider_problem
from fim.config.schema import ModelSettings
from fim.config.script_files import read_script
from fim.config.yamlio import parse
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
        message, hint = unknown_role(ref, checker.roles, checker.listed)
        checker.add(entry.doc.problem(path, message, hint))


CLAUDE_ALIASES = {
    "sonnet": "anthropic/claude-sonnet-4-5",
    "opus": "anthropic/claude-opus-4-5",
    "haiku": "anthropic/claude-haiku-4-5",
}
"""Claude Code's model aliases (a subagent's `model: sonnet`), with a litellm string of
each for the hint (`inherit`, the caller's model, has none)."""

MODEL_FAMILIES = (
    (("gpt-", "chatgpt-", "o1", "o3", "o4"), "openai"),
    (("claude-",), "anthropic"),
    (("gemini-", "gemma-"), "gemini"),
    (("mistral-", "codestral", "magistral", "ministral", "pixtral"), "mistral"),
    (("deepseek-",), "deepseek"),
    (("grok-",), "xai"),
)
"""Model names written without their provider (ADK's `model: gemini-2.0-flash`, the
provider's own docs' `gpt-4o`), by their family's prefix: the provider whose own API
serves them."""

_TABLE_PREFIXES = ("gemini", "vertex_ai", "mistral", "groq", "deepseek", "xai")
"""Providers under whose prefix litellm's table lists a bare name (`vertex_ai/gemini-2.0-
flash`), asked when a model is written without one."""

_BARE = ("openai/", "anthropic/", "deepseek/")
"""Providers whose models litellm's table lists without the prefix (`gpt-4o`)."""


def provider_strings(name: str, listed: Callable[[str], bool] | None = None) -> list[str]:
    """The litellm strings a model name written without its provider probably means: its
    family's provider (`gemini/gemini-2.0-flash`), and, when litellm's price table does not
    list that (`listed`: `fim.llm.catalog.listed`, handed in from a layer up, the file's
    text searched, not parsed), the providers it lists the name under
    (`vertex_ai/gemini-2.0-flash`); at most three."""
    found = [
        f"{provider}/{name}"
        for prefixes, provider in MODEL_FAMILIES
        if name.lower().startswith(prefixes)
    ]
    if listed is None or name.startswith("scripted:"):
        return found[:1]
    if found and (listed(found[0]) or (found[0].startswith(_BARE) and listed(name))):
        return found[:1]  # the provider's own API serves it: no other offered
    found += [f"{p}/{name}" for p in _TABLE_PREFIXES if listed(f"{p}/{name}")]
    return list(dict.fromkeys(found))[:3]


def unknown_role(
    ref: str, roles: Collection[str], listed: Callable[[str], bool] | None = None
) -> tuple[str, str]:
    """(message, hint) for `model: REF` naming no role of fim.yaml (`roles`) and no
    provider: the one wording of `fim validate`, a run and `fim run -m`. A Claude Code alias
    (`sonnet`, `inherit`) is told so; a model name without its provider gets the litellm
    strings it probably means (`provider_strings`); else a did-you-mean over the roles."""
    names = f"model roles: {', '.join(sorted(roles)) or 'none declared'}"
    message = f"unknown model role '{ref}'"
    if ref == "inherit":
        return message, (
            "'inherit' is Claude Code's \"the caller's model\": a fim agent names its own, "
            f"a role of fim.yaml or a litellm string; leave `model:` out for 'general'; {names}"
        )
    if ref.lower() in CLAUDE_ALIASES:
        return message, (
            f"'{ref}' is Claude Code's alias of a Claude model: fim names a role of fim.yaml "
            f"or a litellm string such as {CLAUDE_ALIASES[ref.lower()]}; {names}"
        )
    close = suggest(ref, roles, "model roles") or ""
    if close.startswith("did you mean"):
        return message, close
    meant = provider_strings(ref, listed)
    if meant:
        quoted = " or ".join(f"'{m}'" for m in meant)
        return message, f"did you mean {quoted}? a litellm string names its provider; {names}"
    return message, close + "; or use a litellm string such as openai/gpt-4o-mini"


_COST_LIMITS = ("max_cost_usd", "max_cost_usd_per_day", "max_cost_usd_per_session")


def check_cost_limits(
    snapshot: Any,
    locate: Any,
    price_known: Callable[[str], bool | None],
    meant: Callable[[ModelSettings], str | None] = lambda settings: None,
) -> list[Problem]:
    """A cost limit (`max_cost_usd*`) that holds for an agent whose model has no known
    price refuses every run of that agent before its first call (costs fail closed:
    `fim.run.spend`), so it is a problem here, at the limit, not a surprise at run time.
    `price_known(model)` asks the price table (None: there is none to ask; nothing is
    reported then); a `scripted:` model's price is known, and zero
    (`fim.llm.catalog`). The project's and the key's limits hold for every agent: each is
    reported once per unpriced model, naming the agents it stops. `meant(settings)` is the
    listed model an unlisted name probably means (`meant_model`): the hint offers it before
    a price, which would only price the typo."""
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
                        _price_hint(snapshot, agent.model, meant),
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
                        _price_hint(snapshot, snapshot.agents[agents[0]].model, meant),
                    )
                )
    return problems


def _price_hint(
    snapshot: Any, ref: str | ModelSettings, meant: Callable[[ModelSettings], str | None]
) -> str:
    fix = "add price: {input_per_mtok: ..., output_per_mtok: ...}"
    close = meant(snapshot.model_settings(ref))
    if close is not None:  # a typo is fixed by its spelling, not by pricing it
        fix = f"did you mean '{close}'? litellm's table prices that; or {fix}"
    if isinstance(ref, str) and ref in snapshot.models:
        return f"{fix} to models.{ref} in fim.yaml"
    return f"{fix} to the model, declared as a role under models: in fim.yaml"


# ---------------------------------------------------------------------- model names

LISTED_PROVIDERS = frozenset(
    {"openai", "anthropic", "gemini", "mistral", "groq", "deepseek", "xai"}
)
"""Providers whose own API serves the models litellm's price table lists under them, by the
names it lists: a model of theirs the table lacks, next to one it has, is most likely a typo
(`anthropic/claude-sonet-4-5`). Not local servers (`ollama`, `lm_studio`) or gateways
(`openrouter`, `together_ai`), whose names are their operators', nor any model sent to an
`api_base` of its own."""

MODEL_CUTOFF = 0.85
"""How alike a listed name must be to be offered (difflib's ratio): one letter in a model
name of ten or more, not a neighbouring family (`gpt-4o` for `gpt-5`)."""

_CANDIDATES: dict[str, tuple[object, tuple[str, ...]]] = {}
"""The listed names of each provider, with the table they were read from."""


def _listed(table: Mapping[str, Any], provider: str) -> tuple[str, ...]:
    known = _CANDIDATES.get(provider)
    if known is not None and known[0] is table:
        return known[1]
    names = tuple(
        key.removeprefix(f"{provider}/")
        for key, info in table.items()
        if isinstance(info, dict) and info.get("litellm_provider") == provider
    )
    _CANDIDATES[provider] = (table, names)
    return names


def meant_model(settings: ModelSettings, table: Mapping[str, Any]) -> str | None:
    """The listed model that `settings.model`, which litellm's price `table` does not list,
    probably means (`openai/gpt-4o-mini` for `openai/gpt-4o-minii`); None when it is listed,
    when its provider's names are not the table's to judge (`LISTED_PROVIDERS`, no
    `api_base`, no base-URL variable of the provider set), or when nothing is close."""
    model = settings.model.strip()
    provider, _, name = model.partition("/")
    if not name or provider not in LISTED_PROVIDERS or not table or name.startswith("ft:"):
        return None
    if settings.api_base or settings.extra.get("api_base") or settings.extra.get("base_url"):
        return None
    env = os.environ
    if any(env.get(f"{provider.upper()}_{suffix}") for suffix in ("API_BASE", "BASE_URL")):
        return None  # a gateway or a compatible server answers for the provider here
    if model in table or name in table:
        return None
    close = difflib.get_close_matches(name, _listed(table, provider), n=1, cutoff=MODEL_CUTOFF)
    return f"{provider}/{close[0]}" if close else None


def model_name_warnings(
    snapshot: Any,
    table: Callable[[], Mapping[str, Any]],
    listed: Callable[[str], bool] = lambda _model: False,
) -> list[Problem]:
    """`fim validate`'s warnings of model names that litellm's price table (`table()`:
    `fim.llm.catalog.table`, handed in from a layer up, and read only when a model of a
    `LISTED_PROVIDERS` provider is named that `listed` does not find) does not list, close
    to one it does: at fim.yaml's roles and agents' own `model:`. A warning, not an error:
    a new model ships before the table knows it."""
    found: list[Problem] = []
    places: list[tuple[str, Path_, str | ModelSettings]] = []
    for role, ref in snapshot.project.models.items():
        at: Path_ = ("models", role) + (("model",) if isinstance(ref, ModelSettings) else ())
        places.append(("fim.yaml", at, ref))
    for name, agent in snapshot.agents.items():
        ref = agent.model
        if isinstance(ref, str) and ref in snapshot.project.models:
            continue  # a role: checked at fim.yaml
        at = ("model", "model") if isinstance(ref, ModelSettings) else ("model",)
        places.append((snapshot.source("agent", name).path, at, ref))
    entries = None
    for file, path, ref in places:
        settings = ref if isinstance(ref, ModelSettings) else ModelSettings(model=ref)
        if settings.model.partition("/")[0] not in LISTED_PROVIDERS:
            continue  # most projects' local or scripted models: the table is not read
        name = settings.model.partition("/")[2]
        if listed(settings.model) or listed(name):
            continue  # the usual case, told from the file's text: the table is not parsed
        entries = table() if entries is None else entries
        close = meant_model(settings, entries)
        if close is None:
            continue
        message = f"model '{settings.model}' is not in litellm's model table"
        hint = f"did you mean '{close}'? a model newer than the table is fine as it is"
        found.append(_at_value(snapshot.root, file, path, message, hint))
    return found


def _at_value(root: Path, file: str, path: Path_, message: str, hint: str) -> Problem:
    """A problem at the value at `path` of the project file `file`, read again for its
    position (a snapshot keeps none); line 1 when it cannot be read now (a race)."""
    try:
        return parse((root / file).read_text(encoding="utf-8"), file).problem(path, message, hint)
    except Exception:  # compiled from it: unreadable or unparsable now is a race
        return Problem(file, 1, 1, message, hint)
