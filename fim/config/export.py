"""JSON Schema of every declaration kind, exported from the pydantic models (which *are*
the schema), so editors running yaml-language-server can autocomplete and lint."""

from __future__ import annotations

from typing import Any

SCHEMA_KINDS = ("project", "agent", "connector", "skill", "workflow", "hook", "eval")


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of one kind; connectors are the http|database union."""
    from pydantic import TypeAdapter

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
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def schema_filename(kind: str) -> str:
    return f"{kind}.schema.json"
