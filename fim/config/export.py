"""JSON Schema of every declaration kind, exported from the pydantic models (which *are*
the schema), so editors running yaml-language-server can autocomplete and lint."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
from typing import Any

SCHEMA_KINDS = ("project", "agent", "connector", "skill", "workflow", "hook", "eval")


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of one kind; connectors are the http|database union."""
    # deferred: loading pydantic_core costs tens of ms
    from pydantic import TypeAdapter

    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.schema import KINDS, Connector

    if kind not in SCHEMA_KINDS:
        raise KeyError(kind)
    if kind == "connector":
        schema = TypeAdapter(Connector).json_schema(by_alias=True)
        schema.setdefault("title", "Connector")
        schema.setdefault(
            "description", "A connector in connectors/<name>.yaml: kind http or database."
        )
    else:
        schema = KINDS[kind].model_json_schema(by_alias=True)
    _describe(schema)
    for definition in schema.get("$defs", {}).values():
        _describe(definition)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _describe(schema: dict[str, Any]) -> None:
    """Give each property of a model's schema its field docstring as `description`."""
    docs = field_docs().get(schema.get("title", ""), {})
    for name, prop in schema.get("properties", {}).items():
        if name in docs and "description" not in prop:
            prop["description"] = docs[name]


@functools.cache
def field_docs() -> dict[str, dict[str, str]]:
    """Model title -> {property name (alias if any): docstring}, inherited fields included.

    The string literal right after a field is its documentation (PEP 257's "attribute
    docstring"); read from the source of the fim.config.schema modules with one AST pass.
    """

    # deferred: loading pydantic_core costs tens of ms
    from pydantic import BaseModel

    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config import schema as package
    from fim.workflows.node_types import NODE_TYPES

    modules = [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
    ]
    # Node types live in one file each, outside this package, with their base.
    bases = {base for node in NODE_TYPES.values() for base in node.__mro__}
    modules += [
        importlib.import_module(name)
        for name in sorted({cls.__module__ for cls in bases if cls.__module__.startswith("fim.")})
    ]
    modules = list(dict.fromkeys(modules))
    sources = [inspect.getsource(module) for module in modules]
    own: dict[str, dict[str, str]] = {}
    for node in (n for source in sources for n in ast.parse(source).body):
        if isinstance(node, ast.ClassDef):
            own[node.name] = attribute_docs(node)
    result: dict[str, dict[str, str]] = {}
    # every model of the scanned modules, not only those the package re-exports (a
    # `Budget` or `SandboxSettings` reached only through a field lost its descriptions)
    models = {name: cls for module in modules for name, cls in vars(module).items()}
    models.update({cls.__name__: cls for cls in NODE_TYPES.values()})
    for name, cls in models.items():
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or name not in own:
            continue
        merged: dict[str, str] = {}
        for base in reversed(cls.__mro__):
            merged.update(own.get(base.__name__, {}))
        title = cls.model_config.get("title") or cls.__name__
        result[title] = {
            (info.alias or field): merged[field]
            for field, info in cls.model_fields.items()
            if field in merged
        }
    return result


def attribute_docs(node: ast.ClassDef) -> dict[str, str]:
    """Field name -> the docstring right under it, for the fields `node` itself declares."""
    fields: dict[str, str] = {}
    for stmt, after in zip(node.body, [*node.body[1:], None], strict=True):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            fields[stmt.target.id] = inspect.cleandoc(after.value.value)
    return fields


def schema_filename(kind: str) -> str:
    return f"{kind}.schema.json"
