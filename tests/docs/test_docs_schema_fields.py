"""Every field a user can write in a project file has a description.

The pydantic models of fim/config/schema/ and the workflow node types are the schema;
`fim schema KIND` and editors show a field's attribute docstring (the string right under
it) as its description. A field without one is a key a user meets with no word on what it
does, so a new field comes with its docstring.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from types import ModuleType

from pydantic import BaseModel

from fim.config import schema as schema_package
from fim.config.export import attribute_docs, json_schema
from fim.workflows import node_types


def modules() -> list[ModuleType]:
    found = []
    for package in (schema_package, node_types):
        found.append(package)
        for info in pkgutil.iter_modules(package.__path__):
            found.append(importlib.import_module(f"{package.__name__}.{info.name}"))
    return found


def documented(cls: type) -> set[str]:
    """Names of the fields `cls` itself declares with a docstring right under them."""
    tree = ast.parse(inspect.getsource(cls)).body[0]
    assert isinstance(tree, ast.ClassDef)
    return set(attribute_docs(tree))


def test_every_schema_field_has_a_docstring() -> None:
    missing = []
    seen: set[type] = set()
    for module in modules():
        for cls in vars(module).values():
            if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls in seen:
                continue
            if not cls.__module__.startswith(("fim.config.schema", "fim.workflows.node_types")):
                continue
            seen.add(cls)
            own = [name for name in cls.__annotations__ if name in cls.model_fields]
            written = documented(cls)
            missing += [f"{cls.__module__}.{cls.__name__}.{n}" for n in own if n not in written]
    assert len(seen) > 30, "the schema models were not found"
    assert not missing, "fields without a docstring: " + ", ".join(missing)


def test_fim_schema_shows_the_descriptions_of_models_reached_through_a_field() -> None:
    """`fim schema` read descriptions only of the models the schema package re-exports:
    a `SandboxSettings` or a `Budget` reached through an agent's field showed none."""
    defs = json_schema("agent")["$defs"]
    assert defs["SandboxSettings"]["properties"]["memory_mb"].get("description")
    assert defs["Budget"]["properties"]["max_tokens"].get("description")
