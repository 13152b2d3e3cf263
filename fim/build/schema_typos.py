"""`fim validate`'s warnings about JSON Schema keywords that look misspelt.

JSON Schema ignores a keyword it does not know, so `propertes:` under a connector action's
`parameters` is a valid schema with no properties: validate passed it, the model was
offered no arguments, and every call failed at the API. A key of a schema that is no
keyword but is close to one (`propertes`, `requried`, `minimun`) is warned at its line
with the keyword meant; other unknown keys (`x-...`, OpenAPI's `nullable` and `example`, a
vendor's own words) are left alone, as JSON Schema leaves them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fim.build.schema_shape import KEYWORDS, SUBSCHEMA, SUBSCHEMA_LISTS, SUBSCHEMA_MAPS
from fim.config.yamlio import problem_in_file
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot

Where = tuple[str | int, ...]

OPENAPI_WORDS = frozenset(
    {"nullable", "example", "discriminator", "xml", "externalDocs", "collectionFormat"}
)
"""OpenAPI's own schema words (an imported spec's schemas carry them): not typos."""
_CASED = {keyword.lower(): keyword for keyword in KEYWORDS}
"""Keywords by their lowercase spelling: `Type` and `maxlength` are ignored as typos are."""


def keyword_typos(schema: Any, where: Where = ()) -> Iterator[tuple[Where, str, str]]:
    """(path of the key, the key, the keyword it is close to) for each key of `schema`, and
    of the schemas it nests, that is no keyword but looks like a misspelt one."""
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if not isinstance(key, str):
            continue
        if key in KEYWORDS:
            if key in SUBSCHEMA:
                yield from keyword_typos(value, (*where, key))
            elif key in SUBSCHEMA_LISTS and isinstance(value, list):
                for i, sub in enumerate(value):
                    yield from keyword_typos(sub, (*where, key, i))
            elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    yield from keyword_typos(sub, (*where, key, name))
        elif not key.startswith("x-") and key not in OPENAPI_WORDS:
            close = _CASED.get(key.lower()) or next(
                iter(difflib.get_close_matches(key, KEYWORDS, n=1, cutoff=0.8)), None
            )
            if close:
                yield (*where, key), key, close


def schema_typo_warnings(snapshot: Snapshot) -> list[Problem]:
    """A warning at each misspelt-looking keyword of the schemas a project writes: HTTP
    connector actions' `parameters` and agents' `output_schema`."""
    found: list[Problem] = []
    for name, decl in snapshot.connectors.items():
        for action, spec in (getattr(decl, "actions", None) or {}).items():
            at: Where = ("actions", action, "parameters")
            found += _warned(snapshot, "connector", name, at, spec.parameters)
    for name, agent in snapshot.agents.items():
        found += _warned(snapshot, "agent", name, ("output_schema",), agent.output_schema)
    return found


def _warned(snapshot: Snapshot, kind: str, name: str, at: Where, schema: Any) -> list[Problem]:
    problems = []
    for where, key, meant in keyword_typos(schema):
        source, path = snapshot.source(kind, name), (*at, *where)
        shown = ".".join(str(step) for step in path)
        message = f"{kind} '{name}': {shown}: '{key}' is no JSON Schema keyword: it is ignored"
        hint = f"did you mean '{meant}'?"
        if source.line == 1:  # the declaration is the whole file: the key's own line
            problems.append(problem_in_file(snapshot.root, source.path, path, message, hint))
        else:
            problems.append(Problem(source.path, source.line, source.column, message, hint))
    return problems


__all__ = ["OPENAPI_WORDS", "keyword_typos", "schema_typo_warnings"]
